//! `egraph`: equality saturation over the whole graph. The graph is
//! loaded into an [`egg`] e-graph ([`convert::load`]), the rule library
//! ([`rules::rules`]) is applied until saturation or a budget runs out,
//! and the cheapest equivalent program by the run-time estimate of
//! [`cost`] is extracted back into the IR ([`convert::extract`]). The
//! graph is replaced only when the extracted program is estimated
//! cheaper, so the pass never makes a graph worse by its own measure.
//!
//! What this first part of the optimiser covers: every IR op as an
//! e-node (attributes included), types, weights-only constness and splat
//! values per e-class, identities and cancellations, greedy and DAG-aware
//! extraction ([`extract`]), and the statistics `dnnc ir --after egraph`
//! prints. The later parts (weight folding, multi-pattern
//! merges, algorithm and layout alternatives as e-nodes, the calibrated
//! cost model driving extraction) build on these pieces.

pub mod algos;
pub mod analysis;
pub mod convert;
pub mod cost;
pub mod extract;
pub mod lang;
pub mod merge;
pub mod rules;

#[cfg(test)]
mod tests;

use crate::pipeline::{Pass, PassError, PassStats};
use dnnc_ir::Graph;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The budgets of one saturation run; any may stop it first.
#[derive(Clone, Debug, PartialEq)]
pub struct EGraphConfig {
    /// Most e-nodes the e-graph may grow to.
    pub node_limit: usize,
    /// Most rule-application rounds.
    pub iter_limit: usize,
    /// Wall-clock budget for saturation.
    pub time_limit: Duration,
    /// The machine extraction predicts run time on.
    pub profile: std::sync::Arc<crate::cost::MachineProfile>,
    /// Whether the `weight-layouts` rule offers `layout=lanes`: by
    /// default where this machine's CPU backend can run it
    /// ([`algos::lanes_supported`]); set it to optimise for another
    /// machine, or off to keep the backend's own choice.
    pub weight_layouts: bool,
}

impl Default for EGraphConfig {
    /// Budgets that keep ResNet-50 and Inception-sized graphs well under
    /// the two seconds the optimiser may take.
    fn default() -> Self {
        EGraphConfig {
            node_limit: 100_000,
            iter_limit: 30,
            time_limit: Duration::from_secs(1),
            profile: Default::default(),
            weight_layouts: algos::lanes_supported(),
        }
    }
}

impl EGraphConfig {
    /// Rejects budgets that would stop saturation before it starts.
    pub fn validate(&self) -> Result<(), PassError> {
        let bad = |m: &str| PassError::Config {
            pass: "egraph",
            message: m.to_string(),
        };
        if self.node_limit == 0 {
            return Err(bad("the e-node budget must be at least 1"));
        }
        if self.iter_limit == 0 {
            return Err(bad("the iteration budget must be at least 1"));
        }
        if self.time_limit.is_zero() {
            return Err(bad("the time budget must be above zero"));
        }
        Ok(())
    }
}

/// What one saturation run did.
#[derive(Clone, Debug, PartialEq)]
pub struct EGraphStats {
    /// Rule-application rounds run.
    pub iterations: usize,
    /// E-nodes at the end.
    pub enodes: usize,
    /// E-classes at the end.
    pub eclasses: usize,
    /// Saturation and extraction time.
    pub time: Duration,
    /// Why saturation stopped (`saturated`, or the budget that ran out).
    pub stop_reason: String,
    /// Times each rule applied (merged two e-classes), by rule name.
    pub fired: BTreeMap<String, usize>,
    /// The predicted seconds of the graph before.
    pub cost_before: f64,
    /// The predicted seconds of the extracted program.
    pub cost_after: f64,
    /// Whether the extracted program replaced the graph.
    pub replaced: bool,
    /// Which extraction gave the program: `greedy` (tree cost), `dag`
    /// (shared subexpressions once), `dag+merges` (the DAG choice with
    /// whole merges switched in, [`extract::with_merges`]), or `none` when
    /// no rule fired.
    pub extractor: &'static str,
}

impl EGraphStats {
    /// The lines `--stats` prints.
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec![
            format!(
                "{} iterations, {} e-nodes, {} e-classes, {:.1} ms, stopped: {}",
                self.iterations,
                self.enodes,
                self.eclasses,
                self.time.as_secs_f64() * 1e3,
                self.stop_reason
            ),
            format!(
                "estimated time {:.4} ms -> {:.4} ms ({}; {} extraction)",
                self.cost_before * 1e3,
                self.cost_after * 1e3,
                if self.replaced {
                    "extracted program kept"
                } else {
                    "graph left as it was"
                },
                self.extractor
            ),
        ];
        if self.fired.is_empty() {
            v.push("no rule fired".into());
        } else {
            let f: Vec<String> = self
                .fired
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect();
            v.push(format!("rules fired: {}", f.join(", ")));
        }
        v
    }
}

/// Saturates `g` with the rule library under `cfg` and returns the
/// cheapest equivalent program (or `g` itself when it is no cheaper)
/// with what the run did.
pub fn optimize(g: &Graph, cfg: &EGraphConfig) -> Result<(Graph, EGraphStats), PassError> {
    cfg.validate()?;
    let t0 = Instant::now();
    let mut loaded = convert::load(g);
    loaded.egraph.analysis.profile = cfg.profile.clone();
    let rules = rules::rules();
    let rewrites: Vec<_> = rules
        .iter()
        .filter(|r| cfg.weight_layouts || r.name != "weight-layouts")
        .map(|r| &r.rewrite)
        .collect();
    let runner = egg::Runner::default()
        .with_egraph(loaded.egraph)
        .with_node_limit(cfg.node_limit)
        .with_iter_limit(cfg.iter_limit)
        .with_time_limit(cfg.time_limit)
        .run(rewrites);
    let mut fired = BTreeMap::new();
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            if *n > 0 {
                *fired.entry(name.to_string()).or_insert(0) += n;
            }
        }
    }
    let stop_reason = match &runner.stop_reason {
        Some(egg::StopReason::Saturated) => "saturated".to_string(),
        Some(egg::StopReason::IterationLimit(n)) => format!("iteration budget ({n})"),
        Some(egg::StopReason::NodeLimit(n)) => format!("e-node budget ({n})"),
        Some(egg::StopReason::TimeLimit(s)) => format!("time budget ({s:.3} s)"),
        Some(egg::StopReason::Other(s)) => s.clone(),
        None => "not run".to_string(),
    };
    let egraph = &runner.egraph;
    let profile = &cfg.profile;
    let cost_before = cost::graph_cost(g, profile);
    let mut extractor = "none";
    let (out, cost_after) = if fired.is_empty() {
        (None, cost_before)
    } else {
        // Three extractions; the program the whole-graph estimate rates
        // cheapest wins (the earlier one on a tie).
        let ex = egg::Extractor::new(egraph, cost::RunTime { egraph });
        let best = |c| ex.find_best_node(c).clone();
        let greedy = convert::extract(g, egraph, &loaded.class_of, &best)
            .map_err(|e| PassError::graph("egraph", e))?;
        let mut picked = ("greedy", cost::graph_cost(&greedy, profile), greedy);
        let dag = extract::DagExtractor::new(egraph);
        let roots: Vec<egg::Id> = g
            .outputs()
            .iter()
            .map(|v| loaded.class_of[v.index()])
            .collect();
        let mut dag_choice: std::collections::HashMap<egg::Id, lang::TensorNode> = egraph
            .classes()
            .map(|c| {
                let n = dag
                    .best_node(c.id)
                    .cloned()
                    .unwrap_or_else(|| ex.find_best_node(c.id).clone());
                (c.id, n)
            })
            .collect();
        extract::repair_cycles(egraph, &mut dag_choice, &roots, &best);
        let dag_best = |c: egg::Id| {
            dag_choice
                .get(&egraph.find(c))
                .cloned()
                .unwrap_or_else(|| ex.find_best_node(c).clone())
        };
        let merged = extract::with_merges(egraph, &roots, &dag_best);
        let merged_best = |c: egg::Id| {
            merged
                .get(&egraph.find(c))
                .cloned()
                .unwrap_or_else(|| dag_best(c))
        };
        let others: [(&'static str, &dyn Fn(egg::Id) -> lang::TensorNode); 2] =
            [("dag", &dag_best), ("dag+merges", &merged_best)];
        for (name, choose) in others {
            if let Ok(d) = convert::extract(g, egraph, &loaded.class_of, choose) {
                let c = cost::graph_cost(&d, profile);
                if c < picked.1 {
                    picked = (name, c, d);
                }
            }
        }
        extractor = picked.0;
        (Some(picked.2), picked.1)
    };
    let replaced = out.is_some() && cost_after < cost_before;
    let stats = EGraphStats {
        iterations: runner.iterations.len(),
        enodes: egraph.total_number_of_nodes(),
        eclasses: egraph.number_of_classes(),
        time: t0.elapsed(),
        stop_reason,
        fired,
        cost_before,
        cost_after: if replaced { cost_after } else { cost_before },
        replaced,
        extractor,
    };
    let g = match out {
        Some(o) if replaced => o,
        _ => g.clone(),
    };
    Ok((g, stats))
}

/// The `egraph` pass.
#[derive(Clone, Debug, Default)]
pub struct EGraphOpt {
    /// Its budgets.
    pub config: EGraphConfig,
}

impl Pass for EGraphOpt {
    fn name(&self) -> &'static str {
        "egraph"
    }
    fn description(&self) -> &'static str {
        "equality saturation with the rule library, then the cheapest equivalent program by the run-time estimate"
    }
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError> {
        let (out, stats) = optimize(g, &self.config)?;
        let rewrites = if stats.replaced {
            stats.fired.values().sum()
        } else {
            0
        };
        *g = out;
        Ok(PassStats {
            rewrites,
            notes: stats.lines(),
            ..Default::default()
        })
    }
}
