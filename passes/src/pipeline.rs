//! The pass manager: named passes run in a fixed order, with the verifier
//! after each one, so a broken invariant is reported at the pass that broke
//! it. `dnnc ir --after PASS` and the compiled backends both go through
//! [`Pipeline`], so what a dump shows is what a backend compiles.

use crate::conv_algo::SelectConvAlgo;
use crate::egraph::EGraphOpt;
use crate::fold_bn::FoldBatchNorm;
use crate::fold_weights::FoldWeights;
use crate::fusion::{self, KernelGraph};
use crate::simplify::Simplify;
use crate::split_order::SplitOrder;
use dnnc_ir::{Graph, GraphError, VerifyError};
use std::fmt;

/// What one pass did, for `--after` dumps and tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassStats {
    /// Rewrites applied (nodes removed, folded or rewired); 0 for analyses.
    pub rewrites: usize,
    /// Human-readable remarks, e.g. folds skipped for lack of weight data.
    pub notes: Vec<String>,
    /// The kernel overlay, for the fusion analysis; `None` for rewrites.
    pub kernels: Option<KernelGraph>,
}

/// Why a pass or the pipeline failed.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// A pass name that is not in the pipeline.
    #[error("unknown pass `{name}`; the passes are: {}", .valid.join(", "))]
    UnknownPass {
        /// The name asked for.
        name: String,
        /// Every valid name, in pipeline order.
        valid: Vec<String>,
    },
    /// A graph mutation was rejected (a bug in the pass, or bad weights).
    #[error("pass `{pass}`: {source}")]
    Graph {
        /// The pass.
        pass: &'static str,
        /// The graph error (boxed: it is large and rare).
        source: Box<GraphError>,
    },
    /// The verifier rejected the graph a pass produced.
    #[error("pass `{pass}` broke the IR: {}", .errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Verify {
        /// The pass.
        pass: &'static str,
        /// Every violation.
        errors: Vec<VerifyError>,
    },
    /// A pass was configured with settings it cannot run with.
    #[error("pass `{pass}`: {message}")]
    Config {
        /// The pass.
        pass: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The fusion overlay violated an executor invariant.
    #[error("pass `{pass}` produced an invalid kernel graph: {}", .errors.join("; "))]
    Kernels {
        /// The pass.
        pass: &'static str,
        /// Every violation.
        errors: Vec<String>,
    },
}

impl PassError {
    /// Wraps a graph error raised while running `pass`.
    pub fn graph(pass: &'static str, e: GraphError) -> Self {
        PassError::Graph {
            pass,
            source: Box::new(e),
        }
    }
}

/// A graph pass: a rewrite of the IR or an analysis that produces an
/// overlay. Passes are stateless so one pipeline serves every model.
pub trait Pass {
    /// The name used on the command line (`--after NAME`).
    fn name(&self) -> &'static str;
    /// One line for `dnnc ir --passes`.
    fn description(&self) -> &'static str;
    /// Runs the pass on `g`, rewriting it in place.
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError>;
}

/// The fusion analysis as a pass: leaves the graph alone and returns the
/// kernel overlay in [`PassStats::kernels`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Fusion;

impl Pass for Fusion {
    fn name(&self) -> &'static str {
        "fusion"
    }
    fn description(&self) -> &'static str {
        "group nodes into kernels: contractions/reductions absorb following elementwise chains (analysis overlay, IR unchanged)"
    }
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError> {
        Ok(PassStats {
            kernels: Some(fusion::fuse(g)),
            ..Default::default()
        })
    }
}

/// The result of running a pipeline: per-pass statistics and the kernel
/// overlay of the last fusion pass, if one ran after the last rewrite.
#[derive(Debug, Default)]
pub struct PipelineResult {
    /// `(pass name, stats)` in the order run.
    pub stats: Vec<(&'static str, PassStats)>,
    /// The current kernel overlay; cleared when a later pass rewrites the
    /// graph, since it would be stale.
    pub kernels: Option<KernelGraph>,
}

/// An ordered list of passes.
pub struct Pipeline {
    passes: Vec<Box<dyn Pass>>,
    /// Run `dnnc_ir::verify` (and, after fusion, `verify_kernels`) after
    /// every pass. On by default in debug builds, so tests always check.
    pub verify: bool,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("passes", &self.names())
            .field("verify", &self.verify)
            .finish()
    }
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline::new(vec![
            Box::new(Simplify),
            Box::new(FoldBatchNorm),
            Box::new(EGraphOpt::default()),
            Box::new(FoldWeights),
            Box::new(SplitOrder),
            Box::new(SelectConvAlgo),
            Box::new(Fusion),
        ])
    }
}

impl Pipeline {
    /// The passes every compiled build runs, `--optimize` or not:
    /// `fold-batchnorm`, the compile-time weight preparation any inference
    /// compiler does by default (a model exported without constant
    /// folding, or written by hand, otherwise runs each BatchNorm as an
    /// extra pass over its conv's output, which also keeps the conv's
    /// epilogue out of its GEMM).
    pub fn baseline() -> Self {
        Pipeline::new(vec![Box::new(FoldBatchNorm)])
    }

    /// A pipeline of the given passes, verifying in debug builds.
    pub fn new(passes: Vec<Box<dyn Pass>>) -> Self {
        Pipeline {
            passes,
            verify: cfg!(debug_assertions),
        }
    }

    /// The default pipeline with the `egraph` pass under `config`'s
    /// budgets (checked when the pass runs).
    pub fn with_egraph(config: crate::egraph::EGraphConfig) -> Self {
        let mut p = Pipeline::default();
        for pass in p.passes.iter_mut() {
            if pass.name() == "egraph" {
                *pass = Box::new(EGraphOpt {
                    config: config.clone(),
                });
            }
        }
        p
    }

    /// The passes, in order.
    pub fn passes(&self) -> impl Iterator<Item = &dyn Pass> {
        self.passes.iter().map(|p| p.as_ref())
    }

    /// Pass names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// One `name  description` line per pass, for `dnnc ir --passes`.
    pub fn describe(&self) -> String {
        let width = self.names().iter().map(|n| n.len()).max().unwrap_or(0);
        self.passes
            .iter()
            .map(|p| format!("{:width$}  {}\n", p.name(), p.description()))
            .collect()
    }

    /// Runs every pass.
    pub fn run(&self, g: &mut Graph) -> Result<PipelineResult, PassError> {
        self.run_passes(g, self.passes.len())
    }

    /// Runs the passes up to and including `after`; an unknown name is an
    /// error listing the valid ones (and leaves `g` untouched).
    pub fn run_until(&self, g: &mut Graph, after: &str) -> Result<PipelineResult, PassError> {
        let Some(i) = self.passes.iter().position(|p| p.name() == after) else {
            return Err(PassError::UnknownPass {
                name: after.to_string(),
                valid: self.names().iter().map(|s| s.to_string()).collect(),
            });
        };
        self.run_passes(g, i + 1)
    }

    fn run_passes(&self, g: &mut Graph, count: usize) -> Result<PipelineResult, PassError> {
        let mut result = PipelineResult::default();
        for p in &self.passes[..count] {
            let stats = p.run(g)?;
            if self.verify {
                dnnc_ir::verify(g).map_err(|errors| PassError::Verify {
                    pass: p.name(),
                    errors,
                })?;
                if let Some(kg) = &stats.kernels {
                    fusion::verify_kernels(g, kg).map_err(|errors| PassError::Kernels {
                        pass: p.name(),
                        errors,
                    })?;
                }
            }
            if stats.kernels.is_some() {
                result.kernels = stats.kernels.clone();
            } else if stats.rewrites > 0 {
                result.kernels = None;
            }
            result.stats.push((p.name(), stats));
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_pass_lists_valid_names() {
        let mut g = dnnc_ir::text::parse(
            "graph t { input %x: f32[2]\n %y = Relu(%x)\n output %y }",
            "t.dnn",
        )
        .unwrap();
        let e = Pipeline::default().run_until(&mut g, "nope").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown pass `nope`; the passes are: simplify, fold-batchnorm, egraph, fold-weights, split-order, select-conv-algo, fusion"
        );
    }

    #[test]
    fn fusion_result_is_carried_and_described() {
        let mut g = dnnc_ir::text::parse(
            "graph t { input %x: f32[2]\n %y = Relu(%x)\n output %y }",
            "t.dnn",
        )
        .unwrap();
        let p = Pipeline::default();
        let r = p.run(&mut g).unwrap();
        assert_eq!(r.kernels.unwrap().kernels.len(), 1);
        assert_eq!(r.stats.len(), 7);
        let d = p.describe();
        assert!(d.starts_with("simplify "), "{d}");
        assert_eq!(d.lines().count(), 7);
    }
}
