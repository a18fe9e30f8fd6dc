//! ModelProto → `dnnc_ir::Graph`. Walks the (topologically sorted) ONNX
//! nodes once, keeping every name's state in a slot: a constant known at
//! import time, an IR value, or poisoned by an unsupported node. Constants
//! enter the graph only when a runtime op consumes them, so shape
//! subgraphs fold away without leaving dead nodes behind.

use super::decode::{decode_tensor, dtype_name, input_type, Attrs, Decoded, Known, MAX_ELEMENTS};
use super::error::{OnnxError, UnsupportedNode};
use super::fold::{self, Folded};
use super::proto::{tensor_proto::DataType, GraphProto, ModelProto, NodeProto};
use dnnc_ir::infer::norm_axis;
use dnnc_ir::op::{
    Binary, CellKind, Compare, Conv2d, ConvTranspose2d, CoordMode, Gemm, Logical, Lrn, NearestMode,
    PadMode, Pool2d, Recurrent, ReduceKind, Resize, ResizeMode, RnnActivation, RnnDirection, Unary,
};
use dnnc_ir::{DType, Graph, GraphError, Init, Op, Tensor, TensorType, ValueId};
use ndarray::{ArrayD, IxDyn};
use std::collections::{HashMap, HashSet};

/// Oldest and newest default-domain opsets whose semantics are implemented.
/// Opsets 22 to 27 changed only the type constraints (bfloat16, float8,
/// 4- and 2-bit types) of the ops dnnc imports, so their float32 forms
/// import unchanged.
pub const OPSET_RANGE: (i64, i64) = (7, 27);

/// Largest attribute value (strides, pads, dilations) accepted, so window
/// arithmetic cannot overflow.
const MAX_ATTR: i64 = 1 << 20;

/// Every op_type of the default domain the importer handles.
pub const SUPPORTED_OPS: &[&str] = &[
    "Conv",
    "MatMul",
    "Gemm",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "BatchNormalization",
    "LRN",
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "Clip",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Softplus",
    "Gelu",
    "Softmax",
    "LogSoftmax",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Sqrt",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Reciprocal",
    "Erf",
    "Max",
    "Min",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "Concat",
    "Split",
    "Slice",
    "Reshape",
    "Flatten",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Pad",
    "Gather",
    "Expand",
    "Identity",
    "Dropout",
    "Constant",
    "Shape",
    "Size",
    "ConstantOfShape",
    "Range",
    "Cast",
    "Equal",
    "Where",
    "Mod",
    "Less",
    "Greater",
    "Not",
    "And",
    "Or",
    "Tile",
    "Sum",
    "Mean",
    "ConvTranspose",
    "InstanceNormalization",
    "LayerNormalization",
    "PRelu",
    "Selu",
    "Sign",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
    "Einsum",
    "Resize",
    "Upsample",
    "RNN",
    "GRU",
    "LSTM",
];

/// State of one ONNX name.
enum Slot {
    /// Known at import time. `t` moves into the weight store once the value
    /// is materialised (`id` set); f32 initializers (`init`) become params.
    Const {
        t: Option<Tensor>,
        orig: DataType,
        init: bool,
        id: Option<ValueId>,
    },
    /// A runtime value of the graph.
    Value(ValueId),
    /// Produced by an unsupported node (already reported).
    Poisoned,
    /// Unusable for the given reason (e.g. an initializer of another dtype).
    Bad(String),
}

/// Per-node failure: collected (`Unsup`) or fatal.
enum NErr {
    Unsup(String),
    Fatal(OnnxError),
}

impl From<OnnxError> for NErr {
    fn from(e: OnnxError) -> Self {
        NErr::Fatal(e)
    }
}

impl From<String> for NErr {
    fn from(s: String) -> Self {
        NErr::Unsup(s)
    }
}

type R<T> = Result<T, NErr>;

macro_rules! unsup {
    ($($t:tt)*) => { return Err(NErr::Unsup(format!($($t)*))) };
}

/// The node being converted, for error messages.
struct Ctx<'a> {
    p: &'a NodeProto,
    label: String,
    op: &'a str,
}

impl Ctx<'_> {
    fn invalid(&self, message: impl Into<String>) -> NErr {
        NErr::Fatal(OnnxError::Invalid {
            node: self.label.clone(),
            op_type: self.op.to_string(),
            message: message.into(),
        })
    }

    fn graph_err(&self, source: GraphError) -> NErr {
        NErr::Fatal(OnnxError::Graph {
            node: self.label.clone(),
            op_type: self.op.to_string(),
            source: Box::new(source),
        })
    }

    /// The name of input `i`, if present and not the empty "absent" name.
    fn input(&self, i: usize) -> Option<&str> {
        self.p
            .input
            .get(i)
            .map(|s| s.as_str())
            .filter(|s| !s.is_empty())
    }

    fn req_input(&self, i: usize, what: &str) -> R<&str> {
        self.input(i)
            .ok_or_else(|| self.invalid(format!("input {i} ({what}) is missing")))
    }

    fn out0(&self) -> R<String> {
        match self.p.output.first() {
            Some(s) if !s.is_empty() => Ok(s.clone()),
            _ => Err(self.invalid("has no output")),
        }
    }

    /// Extra outputs (index >= 1) that are named.
    fn extra_outputs(&self) -> impl Iterator<Item = &String> {
        self.p.output.iter().skip(1).filter(|s| !s.is_empty())
    }
}

struct Importer {
    g: Graph,
    opset: i64,
    slots: HashMap<String, Slot>,
    /// Why a value that could not be folded was declined.
    declined: HashMap<String, String>,
    /// Every name of the ONNX graph, so helper values never clash.
    reserved: HashSet<String>,
    /// Names some node or graph output reads.
    consumed: HashSet<String>,
    unsupported: Vec<UnsupportedNode>,
    next_fresh: usize,
}

/// Imports a decoded model.
pub(crate) fn import_model(model: &ModelProto, file: &str) -> Result<Graph, OnnxError> {
    let Some(graph) = &model.graph else {
        return Err(OnnxError::NoGraph { file: file.into() });
    };
    let mut opset = None;
    for o in &model.opset_import {
        if matches!(o.domain(), "" | "ai.onnx") {
            opset = Some(o.version());
        }
    }
    let opset = opset.ok_or_else(|| OnnxError::Opset {
        file: file.into(),
        message: "the model imports no default-domain (ai.onnx) opset".into(),
    })?;
    if opset < OPSET_RANGE.0 || opset > OPSET_RANGE.1 {
        return Err(OnnxError::Opset {
            file: file.into(),
            message: format!(
                "ai.onnx opset {opset} is not supported (dnnc implements opsets {}..={}); re-export the model with opset_version=17",
                OPSET_RANGE.0, OPSET_RANGE.1
            ),
        });
    }
    if graph.output.is_empty() {
        return Err(OnnxError::NoOutputs { file: file.into() });
    }
    let name = match graph.name() {
        "" => std::path::Path::new(file)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("model")
            .to_string(),
        n => n.to_string(),
    };
    let mut imp = Importer {
        g: Graph::new(name),
        opset,
        slots: HashMap::new(),
        declined: HashMap::new(),
        reserved: HashSet::new(),
        consumed: HashSet::new(),
        unsupported: vec![],
        next_fresh: 0,
    };
    imp.collect_names(graph);
    imp.declare_sources(graph)?;
    for (idx, node) in graph.node.iter().enumerate() {
        imp.node(model, idx, node)?;
    }
    imp.finish(graph)
}

impl Importer {
    fn collect_names(&mut self, graph: &GraphProto) {
        for n in &graph.node {
            self.reserved.extend(n.output.iter().cloned());
            self.reserved.extend(n.input.iter().cloned());
            self.consumed
                .extend(n.input.iter().filter(|s| !s.is_empty()).cloned());
        }
        for v in graph.input.iter().chain(&graph.output) {
            self.reserved.insert(v.name().to_string());
        }
        for o in &graph.output {
            self.consumed.insert(o.name().to_string());
        }
        for t in &graph.initializer {
            self.reserved.insert(t.name().to_string());
        }
    }

    /// Graph inputs (minus initializers) and initializers.
    fn declare_sources(&mut self, graph: &GraphProto) -> Result<(), OnnxError> {
        let mut init_names = HashSet::new();
        for t in &graph.initializer {
            let name = t.name().to_string();
            if !init_names.insert(name.clone()) {
                return Err(OnnxError::Duplicate {
                    name,
                    what: "two initializers".into(),
                });
            }
            let slot = match decode_tensor(t, &name)? {
                Decoded::Ok(Known { t, orig }) => Slot::Const {
                    init: orig == DataType::Float,
                    t: Some(t),
                    orig,
                    id: None,
                },
                Decoded::UnsupportedDtype(dt) => Slot::Bad(format!(
                    "initializer `{name}` has data type {dt}; dnnc supports FLOAT, INT64, INT32 and BOOL tensors (DOUBLE only where the value is read at import)"
                )),
            };
            self.slots.insert(name, slot);
        }
        for s in &graph.sparse_initializer {
            let name = s
                .values
                .as_ref()
                .map(|v| v.name().to_string())
                .unwrap_or_default();
            self.slots.insert(
                name.clone(),
                Slot::Bad(format!(
                    "initializer `{name}` is sparse, which dnnc does not support"
                )),
            );
        }
        for vi in &graph.input {
            let name = vi.name().to_string();
            if init_names.contains(&name) {
                continue;
            }
            if self.slots.contains_key(&name) {
                return Err(OnnxError::Duplicate {
                    name,
                    what: "a graph input declared twice".into(),
                });
            }
            let ty = input_type(vi)?;
            let id = self
                .g
                .add_input(&name, ty)
                .map_err(|e| OnnxError::InputType {
                    input: name.clone(),
                    message: e.to_string(),
                })?;
            self.slots.insert(name, Slot::Value(id));
        }
        Ok(())
    }

    fn node(&mut self, model: &ModelProto, idx: usize, p: &NodeProto) -> Result<(), OnnxError> {
        let op = p.op_type();
        let label = match p.name() {
            "" => format!("{op} #{idx}"),
            n => n.to_string(),
        };
        let domain = p.domain();
        let cx = Ctx { p, label, op };
        for out in p.output.iter().filter(|s| !s.is_empty()) {
            if self.slots.contains_key(out) {
                return Err(OnnxError::Duplicate {
                    name: out.clone(),
                    what: format!("also an output of node `{}` ({op})", cx.label),
                });
            }
        }
        for inp in p.input.iter().filter(|s| !s.is_empty()) {
            if !self.slots.contains_key(inp) {
                return Err(OnnxError::Dangling {
                    node: cx.label.clone(),
                    op_type: op.into(),
                    input: inp.clone(),
                });
            }
        }
        let report = |imp: &mut Importer, reason: String| {
            let (dom, ver) = if matches!(domain, "" | "ai.onnx") {
                ("ai.onnx".to_string(), imp.opset)
            } else {
                let v = model
                    .opset_import
                    .iter()
                    .find(|o| o.domain() == domain)
                    .map(|o| o.version())
                    .unwrap_or(0);
                (domain.to_string(), v)
            };
            imp.unsupported.push(UnsupportedNode {
                node: cx.label.clone(),
                op_type: op.into(),
                domain: dom,
                opset: ver,
                reason,
            });
            for out in p.output.iter().filter(|s| !s.is_empty()) {
                imp.slots.insert(out.clone(), Slot::Poisoned);
            }
        };
        if !matches!(domain, "" | "ai.onnx") {
            report(
                self,
                format!("domain `{domain}` is not supported; dnnc imports only default-domain (ai.onnx) ops"),
            );
            return Ok(());
        }
        if !SUPPORTED_OPS.contains(&op) {
            report(self, format!("op `{op}` is not supported by dnnc"));
            return Ok(());
        }
        let poisoned = p
            .input
            .iter()
            .any(|i| matches!(self.slots.get(i), Some(Slot::Poisoned)));
        if poisoned {
            for out in p.output.iter().filter(|s| !s.is_empty()) {
                self.slots.insert(out.clone(), Slot::Poisoned);
            }
            return Ok(());
        }
        match self.convert(&cx) {
            Ok(()) => Ok(()),
            Err(NErr::Unsup(reason)) => {
                report(self, reason);
                Ok(())
            }
            Err(NErr::Fatal(e)) => Err(e),
        }
    }

    fn finish(mut self, graph: &GraphProto) -> Result<Graph, OnnxError> {
        let mut outs = vec![];
        let mut seen = HashSet::new();
        for o in &graph.output {
            let name = o.name().to_string();
            if !seen.insert(name.clone()) {
                return Err(OnnxError::Duplicate {
                    name,
                    what: "listed twice among the graph outputs".into(),
                });
            }
            let fake = NodeProto::default();
            let cx = Ctx {
                p: &fake,
                label: format!("graph output `{name}`"),
                op: "output",
            };
            match self.slots.get(&name) {
                None => return Err(OnnxError::UndefinedOutput { output: name }),
                Some(Slot::Poisoned) => continue,
                _ => {}
            }
            match self.value(&cx, &name) {
                Ok(v) => outs.push(v),
                Err(NErr::Fatal(e)) => return Err(e),
                Err(NErr::Unsup(reason)) => self.unsupported.push(UnsupportedNode {
                    node: cx.label,
                    op_type: "output".into(),
                    domain: "ai.onnx".into(),
                    opset: self.opset,
                    reason,
                }),
            }
        }
        if !self.unsupported.is_empty() {
            return Err(OnnxError::Unsupported(self.unsupported));
        }
        self.g.set_outputs(outs);
        // Constants whose only readers folded away: none are materialised,
        // but sweep anyway so the invariant holds whatever the op mix.
        let order = self.g.topo_order();
        for n in order.into_iter().rev() {
            let node = self.g.node(n);
            if matches!(node.op, Op::Constant | Op::Param(_)) {
                let v = node.outputs[0];
                if self.g.users(v).is_empty() && !self.g.outputs().contains(&v) {
                    let _ = self.g.remove_node(n);
                }
            }
        }
        Ok(self.g)
    }

    // ----- slot access -------------------------------------------------

    fn fresh(&mut self, base: &str) -> String {
        loop {
            self.next_fresh += 1;
            let name = format!("{base}__{}", self.next_fresh);
            if !self.reserved.contains(&name) && self.g.value_by_name(&name).is_none() {
                self.reserved.insert(name.clone());
                return name;
            }
        }
    }

    /// The constant data of `name`, if known at import time.
    fn tensor(&self, name: &str) -> Option<&Tensor> {
        match self.slots.get(name)? {
            Slot::Const { t: Some(t), .. } => Some(t),
            Slot::Const { t: None, .. } => self.g.weights.get(name),
            _ => None,
        }
    }

    fn is_foldable(&self, name: &str) -> bool {
        matches!(self.slots.get(name), Some(Slot::Const { init: false, .. }))
    }

    fn ty(&self, cx: &Ctx, name: &str) -> R<TensorType> {
        match self.slots.get(name) {
            Some(Slot::Value(v)) => Ok(self.g.value(*v).ty.clone()),
            Some(Slot::Const { .. }) => Ok(self
                .tensor(name)
                .map(|t| t.ty())
                .unwrap_or_else(|| TensorType::f32(vec![]))),
            Some(Slot::Bad(r)) => Err(NErr::Unsup(r.clone())),
            Some(Slot::Poisoned) => unsup!("`{name}` comes from an unsupported node"),
            None => Err(NErr::Fatal(OnnxError::Dangling {
                node: cx.label.clone(),
                op_type: cx.op.into(),
                input: name.into(),
            })),
        }
    }

    /// Input `i` as a constant, or an error saying it must be one.
    fn need_const(&self, cx: &Ctx, i: usize, what: &str) -> R<Tensor> {
        let name = cx.req_input(i, what)?;
        if let Some(Slot::Bad(r)) = self.slots.get(name) {
            return Err(NErr::Unsup(r.clone()));
        }
        match self.tensor(name) {
            Some(t) => Ok(t.clone()),
            None => {
                let why = self
                    .declined
                    .get(name)
                    .map(|r| format!(" (it could not be folded: {r})"))
                    .unwrap_or_default();
                unsup!(
                    "input {i} ({what}, `{name}`) must be a constant (an initializer, a Constant node or a shape computation dnnc can fold at import), but it is computed at run time{why}"
                )
            }
        }
    }

    fn const_i64s(&self, cx: &Ctx, i: usize, what: &str) -> R<Vec<i64>> {
        let t = self.need_const(cx, i, what)?;
        match t {
            Tensor::I64(a) => Ok(a.iter().copied().collect()),
            other => Err(cx.invalid(format!(
                "input {i} ({what}) must be an integer tensor, found {}",
                other.ty()
            ))),
        }
    }

    fn opt_i64s(&self, cx: &Ctx, i: usize, what: &str) -> R<Option<Vec<i64>>> {
        match cx.input(i) {
            None => Ok(None),
            Some(_) => self.const_i64s(cx, i, what).map(Some),
        }
    }

    fn opt_scalar_f32(&self, cx: &Ctx, i: usize, what: &str) -> R<Option<f32>> {
        match cx.input(i) {
            None => Ok(None),
            Some(_) => {
                let t = self.need_const(cx, i, what)?;
                let v = Known::new(t).f32s();
                match v.as_slice() {
                    [x] => Ok(Some(*x)),
                    [] => Ok(None),
                    _ => Err(cx.invalid(format!(
                        "input {i} ({what}) must be a scalar, found {} values",
                        v.len()
                    ))),
                }
            }
        }
    }

    /// Materialises `name` as a graph value (params for f32 initializers,
    /// consts for other known data).
    fn value(&mut self, cx: &Ctx, name: &str) -> R<ValueId> {
        match self.slots.get_mut(name) {
            None => Err(NErr::Fatal(OnnxError::Dangling {
                node: cx.label.clone(),
                op_type: cx.op.into(),
                input: name.into(),
            })),
            Some(Slot::Value(id)) => Ok(*id),
            Some(Slot::Bad(r)) => Err(NErr::Unsup(r.clone())),
            Some(Slot::Poisoned) => unsup!("`{name}` comes from an unsupported node"),
            Some(Slot::Const { t, orig, init, id }) => {
                if let Some(id) = id {
                    return Ok(*id);
                }
                if *orig == DataType::Double {
                    unsup!(
                        "tensor `{name}` is DOUBLE; dnnc accepts DOUBLE constants only where their value is read at import (e.g. Clip bounds), not as tensor operands"
                    );
                }
                let data = t.take().expect("unmaterialised constant holds its data");
                let r = if *init {
                    let ty = data.ty();
                    self.g.weights.insert(name, data);
                    self.g.add_param(name, ty, Init::External(name.to_string()))
                } else {
                    self.g.add_constant(name, data)
                };
                let v = r.map_err(|e| cx.graph_err(e))?;
                *id = Some(v);
                Ok(v)
            }
        }
    }

    fn set_const(&mut self, name: &str, t: Tensor, orig: DataType) {
        self.slots.insert(
            name.to_string(),
            Slot::Const {
                t: Some(t),
                orig,
                init: false,
                id: None,
            },
        );
    }

    fn set_known(&mut self, name: &str, t: Tensor) {
        let orig = Known::new(t.clone()).orig;
        self.set_const(name, t, orig)
    }

    /// Adds `op` on the named inputs, or folds it when every input is a
    /// (non-parameter) constant. Results are checked against the size bound.
    fn apply(&mut self, cx: &Ctx, op: Op, inputs: &[&str], outputs: &[String]) -> R<()> {
        if inputs.iter().all(|n| self.is_foldable(n)) {
            let ts: Vec<&Tensor> = inputs.iter().filter_map(|n| self.tensor(n)).collect();
            if ts.len() == inputs.len() {
                match fold::fold_ir(&op, &ts).map_err(|e| cx.graph_err(e))? {
                    Folded::Done(results) => {
                        if results.len() == outputs.len() {
                            for (name, t) in outputs.iter().zip(results) {
                                self.set_known(name, t);
                            }
                            return Ok(());
                        }
                    }
                    Folded::Declined(reason) => {
                        for o in outputs {
                            self.declined.insert(o.clone(), reason.clone());
                        }
                    }
                }
            }
        }
        let mut ids = Vec::with_capacity(inputs.len());
        for n in inputs {
            ids.push(self.value(cx, n)?);
        }
        let names: Vec<&str> = outputs.iter().map(|s| s.as_str()).collect();
        let outs = self
            .g
            .add_node(op, &ids, &names)
            .map_err(|e| cx.graph_err(e))?;
        for (name, v) in outputs.iter().zip(outs) {
            let ty = &self.g.value(v).ty;
            if ty
                .shape
                .iter()
                .fold(1u128, |a, &d| a.saturating_mul(d as u128))
                > MAX_ELEMENTS
            {
                return Err(cx.invalid(format!(
                    "result `{name}` would be {ty}, more than 2^40 elements"
                )));
            }
            self.slots.insert(name.clone(), Slot::Value(v));
        }
        Ok(())
    }

    /// `out = in` without a node when `in` is known (parameters stay
    /// parameters, named after `out`), else an IR op.
    fn alias(&mut self, cx: &Ctx, input: &str, out: &str, op: Op) -> R<()> {
        if let Some(Slot::Const { orig, init, .. }) = self.slots.get(input) {
            let (orig, init) = (*orig, *init);
            let t = self.tensor(input).cloned().expect("constant data");
            self.slots.insert(
                out.to_string(),
                Slot::Const {
                    t: Some(t),
                    orig,
                    init,
                    id: None,
                },
            );
            return Ok(());
        }
        self.apply(cx, op, &[input], &[out.to_string()])
    }

    // ----- conversion --------------------------------------------------

    fn convert(&mut self, cx: &Ctx) -> R<()> {
        let mut a = Attrs::new(&cx.p.attribute)?;
        let v = self.opset;
        let op = cx.op;
        match op {
            "Conv" | "ConvTranspose" | "MaxPool" | "AveragePool"
                if self.input_rank(cx) == Some(3) =>
            {
                return self.as_2d(cx);
            }
            "Conv" => self.conv(cx, &mut a)?,
            "MaxPool" | "AveragePool" => self.pool(cx, &mut a)?,
            "MatMul" => {
                let (x, y) = (cx.req_input(0, "A")?, cx.req_input(1, "B")?);
                self.apply(cx, Op::MatMul, &[x, y], &[cx.out0()?])?
            }
            "Gemm" => {
                if v < 7 {
                    a.take_any("broadcast");
                }
                let g = Gemm {
                    alpha: a.float("alpha", 1.0)?,
                    beta: a.float("beta", 1.0)?,
                    trans_a: a.flag("transA", false)?,
                    trans_b: a.flag("transB", false)?,
                };
                let mut ins = vec![cx.req_input(0, "A")?, cx.req_input(1, "B")?];
                if let Some(c) = cx.input(2) {
                    ins.push(c);
                }
                self.apply(cx, Op::Gemm(g), &ins, &[cx.out0()?])?
            }
            "GlobalAveragePool" | "GlobalMaxPool" => {
                let x = cx.req_input(0, "X")?;
                let o = if op == "GlobalAveragePool" {
                    Op::GlobalAveragePool
                } else {
                    Op::GlobalMaxPool
                };
                self.apply(cx, o, &[x], &[cx.out0()?])?
            }
            "BatchNormalization" => {
                let epsilon = a.float("epsilon", 1e-5)?;
                a.take_any("momentum");
                if v < 9 && !a.flag("spatial", true)? {
                    unsup!("spatial=0 (per-activation statistics) is not supported");
                }
                if v >= 14 && a.flag("training_mode", false)? {
                    unsup!("training_mode=1 is not supported; export the model in eval() mode");
                }
                if cx.extra_outputs().next().is_some() {
                    unsup!("only the inference form (one output) is supported; running mean/var outputs come from a training-mode export: export the model in eval() mode");
                }
                let mut ins = vec![];
                for (i, w) in ["X", "scale", "B", "input_mean", "input_var"]
                    .iter()
                    .enumerate()
                {
                    ins.push(cx.req_input(i, w)?);
                }
                self.apply(cx, Op::BatchNormalization { epsilon }, &ins, &[cx.out0()?])?
            }
            "LRN" => {
                let size = a
                    .int_opt("size")?
                    .ok_or_else(|| cx.invalid("attribute `size` is required"))?;
                if !(1..=MAX_ATTR).contains(&size) {
                    return Err(
                        cx.invalid(format!("attribute `size` must be positive, found {size}"))
                    );
                }
                let l = Lrn {
                    size: size as usize,
                    alpha: a.float("alpha", 1e-4)?,
                    beta: a.float("beta", 0.75)?,
                    bias: a.float("bias", 1.0)?,
                };
                self.apply(cx, Op::Lrn(l), &[cx.req_input(0, "X")?], &[cx.out0()?])?
            }
            "Relu" | "Sigmoid" | "Tanh" | "Softplus" | "Sqrt" | "Exp" | "Log" | "Neg" | "Abs"
            | "Reciprocal" | "Erf" | "HardSwish" | "LeakyRelu" | "Elu" | "HardSigmoid" | "Gelu"
            | "Selu" | "Sign" | "Floor" | "Ceil" | "Round" | "Sin" | "Cos" => {
                let u = match op {
                    "Relu" => Unary::Relu,
                    "Sigmoid" => Unary::Sigmoid,
                    "Tanh" => Unary::Tanh,
                    "Softplus" => Unary::Softplus,
                    "Sqrt" => Unary::Sqrt,
                    "Exp" => Unary::Exp,
                    "Log" => Unary::Log,
                    "Neg" => Unary::Neg,
                    "Abs" => Unary::Abs,
                    "Reciprocal" => Unary::Reciprocal,
                    "Erf" => Unary::Erf,
                    "Sign" => Unary::Sign,
                    "Floor" => Unary::Floor,
                    "Ceil" => Unary::Ceil,
                    "Round" => Unary::Round,
                    "Sin" => Unary::Sin,
                    "Cos" => Unary::Cos,
                    "Selu" => Unary::Selu {
                        alpha: a.float("alpha", 1.673_263_2)?,
                        gamma: a.float("gamma", 1.050_701)?,
                    },
                    "HardSwish" => {
                        if v < 14 {
                            unsup!("HardSwish exists from opset 14; the model imports opset {v}");
                        }
                        Unary::HardSwish
                    }
                    "LeakyRelu" => Unary::LeakyRelu {
                        alpha: a.float("alpha", 0.01)?,
                    },
                    "Elu" => Unary::Elu {
                        alpha: a.float("alpha", 1.0)?,
                    },
                    "HardSigmoid" => Unary::HardSigmoid {
                        alpha: a.float("alpha", 0.2)?,
                        beta: a.float("beta", 0.5)?,
                    },
                    _ => {
                        if v < 20 {
                            unsup!(
                                "Gelu exists in ai.onnx from opset 20; the model imports opset {v}"
                            );
                        }
                        let approx = a.string("approximate", "none")?;
                        let tanh_approx = match approx.as_str() {
                            "none" => false,
                            "tanh" => true,
                            other => unsup!("approximate=`{other}` is not supported (none, tanh)"),
                        };
                        Unary::Gelu { tanh_approx }
                    }
                };
                self.apply(cx, Op::Unary(u), &[cx.req_input(0, "X")?], &[cx.out0()?])?
            }
            "Clip" => {
                let (min, max) = if v < 11 {
                    (
                        a.float("min", f32::NEG_INFINITY)?,
                        a.float("max", f32::INFINITY)?,
                    )
                } else {
                    (
                        self.opt_scalar_f32(cx, 1, "min")?
                            .unwrap_or(f32::NEG_INFINITY),
                        self.opt_scalar_f32(cx, 2, "max")?.unwrap_or(f32::INFINITY),
                    )
                };
                // ONNX: with min > max every element becomes max.
                let min = if min > max { max } else { min };
                let x = cx.req_input(0, "input")?;
                self.apply(cx, Op::Unary(Unary::Clip { min, max }), &[x], &[cx.out0()?])?
            }
            "Softmax" | "LogSoftmax" => self.softmax(cx, &mut a)?,
            "Add" | "Sub" | "Mul" | "Div" | "Pow" => {
                if v < 7 {
                    a.take_any("broadcast");
                    a.take_any("axis");
                }
                let b = match op {
                    "Add" => Binary::Add,
                    "Sub" => Binary::Sub,
                    "Mul" => Binary::Mul,
                    "Div" => Binary::Div,
                    _ => Binary::Pow,
                };
                let x = cx.req_input(0, "A")?;
                let mut y = cx.req_input(1, "B")?.to_string();
                if b == Binary::Pow {
                    // Pow allows an exponent of another dtype (opset 12+).
                    let (xt, yt) = (self.ty(cx, x)?, self.ty(cx, &y)?);
                    if xt.dtype != DType::F32 {
                        unsup!(
                            "Pow of a {} base is not supported (dnnc's Pow is f32)",
                            xt.dtype
                        );
                    }
                    if xt.dtype != yt.dtype {
                        let name = self.fresh(&y);
                        if let Some(t) = self.tensor(&y) {
                            let t = fold::cast(t, xt.dtype);
                            self.set_known(&name, t);
                        } else {
                            self.apply(
                                cx,
                                Op::Cast { to: xt.dtype },
                                &[&y],
                                std::slice::from_ref(&name),
                            )?;
                        }
                        y = name;
                    }
                }
                self.apply(cx, Op::Binary(b), &[x, &y], &[cx.out0()?])?
            }
            "Max" | "Min" | "Sum" | "Mean" => {
                let b = match op {
                    "Max" => Binary::Max,
                    "Min" => Binary::Min,
                    _ => Binary::Add,
                };
                let ins: Vec<String> =
                    cx.p.input
                        .iter()
                        .filter(|s| !s.is_empty())
                        .cloned()
                        .collect();
                let out = cx.out0()?;
                // Mean sums into a temporary, then divides by the count.
                let mean = op == "Mean" && ins.len() > 1;
                let sum_out = if mean { self.fresh(&out) } else { out.clone() };
                match ins.len() {
                    0 => return Err(cx.invalid("needs at least one input")),
                    1 => self.alias(cx, &ins[0], &out, Op::Identity)?,
                    n => {
                        let mut acc = ins[0].clone();
                        for (k, next) in ins.iter().enumerate().skip(1) {
                            let name = if k == n - 1 {
                                sum_out.clone()
                            } else {
                                self.fresh(&out)
                            };
                            self.apply(
                                cx,
                                Op::Binary(b),
                                &[&acc, next],
                                std::slice::from_ref(&name),
                            )?;
                            acc = name;
                        }
                        if mean {
                            let count = self.fresh(&out);
                            self.set_known(&count, f32_scalar(n as f32));
                            self.apply(cx, Op::Binary(Binary::Div), &[&sum_out, &count], &[out])?;
                        }
                    }
                }
            }
            "ReduceMean" | "ReduceSum" | "ReduceMax" => {
                let kind = match op {
                    "ReduceMean" => ReduceKind::Mean,
                    "ReduceSum" => ReduceKind::Sum,
                    _ => ReduceKind::Max,
                };
                let keepdims = a.flag("keepdims", true)?;
                let from_input = (kind == ReduceKind::Sum && v >= 13) || v >= 18;
                let (axes, noop) = if from_input {
                    (
                        self.opt_i64s(cx, 1, "axes")?.unwrap_or_default(),
                        a.flag("noop_with_empty_axes", false)?,
                    )
                } else {
                    (a.ints_opt("axes")?.unwrap_or_default(), false)
                };
                let x = cx.req_input(0, "data")?;
                let out = cx.out0()?;
                let reduce = Op::Reduce {
                    kind,
                    axes: axes.clone(),
                    keepdims,
                };
                let dtype = self.ty(cx, x)?.dtype;
                if axes.is_empty() && noop {
                    self.alias(cx, x, &out, Op::Identity)?
                } else if dtype == DType::Bool && kind == ReduceKind::Max {
                    // Max over bools is any(): exact through 0.0/1.0.
                    let (f, m) = (self.fresh(&out), self.fresh(&out));
                    let to_f32 = Op::Cast { to: DType::F32 };
                    self.apply(cx, to_f32, &[x], std::slice::from_ref(&f))?;
                    self.apply(cx, reduce, &[&f], std::slice::from_ref(&m))?;
                    self.apply(cx, Op::Cast { to: DType::Bool }, &[&m], &[out])?
                } else if dtype != DType::F32 {
                    unsup!("{op} over {dtype} data is not supported (dnnc reduces f32)")
                } else {
                    self.apply(cx, reduce, &[x], &[out])?
                }
            }
            "Concat" => {
                let axis = a
                    .int_opt("axis")?
                    .ok_or_else(|| cx.invalid("attribute `axis` is required"))?;
                let ins: Vec<&str> =
                    cx.p.input
                        .iter()
                        .filter(|s| !s.is_empty())
                        .map(|s| s.as_str())
                        .collect();
                if ins.is_empty() {
                    return Err(cx.invalid("needs at least one input"));
                }
                self.apply(cx, Op::Concat { axis }, &ins, &[cx.out0()?])?
            }
            "Split" => self.split(cx, &mut a)?,
            "Slice" => self.slice(cx, &mut a)?,
            "Reshape" => {
                let shape = if v < 5 {
                    a.ints_opt("shape")?
                        .ok_or_else(|| cx.invalid("attribute `shape` is required"))?
                } else {
                    self.const_i64s(cx, 1, "shape")?
                };
                if v >= 14 && a.flag("allowzero", false)? && shape.contains(&0) {
                    unsup!("allowzero=1 with a 0 in the target shape {shape:?} (an empty dimension) is not supported");
                }
                let known = shape
                    .iter()
                    .filter(|&&d| d > 0)
                    .fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
                if known > MAX_ELEMENTS {
                    return Err(cx.invalid(format!("target shape {shape:?} is too large")));
                }
                let x = cx.req_input(0, "data")?;
                self.apply(cx, Op::Reshape { shape }, &[x], &[cx.out0()?])?
            }
            "Flatten" => {
                let axis = a.int("axis", 1)?;
                self.apply(
                    cx,
                    Op::Flatten { axis },
                    &[cx.req_input(0, "input")?],
                    &[cx.out0()?],
                )?
            }
            "Transpose" => {
                let x = cx.req_input(0, "data")?;
                let rank = self.ty(cx, x)?.rank();
                let perm = a
                    .ints_opt("perm")?
                    .unwrap_or_else(|| (0..rank as i64).rev().collect());
                let mut seen = vec![false; rank];
                for &p in &perm {
                    if p < 0 || p as usize >= rank || seen[p as usize] || perm.len() != rank {
                        return Err(
                            cx.invalid(format!("perm {perm:?} is not a permutation of 0..{rank}"))
                        );
                    }
                    seen[p as usize] = true;
                }
                let perm = perm.into_iter().map(|p| p as usize).collect();
                self.apply(cx, Op::Transpose { perm }, &[x], &[cx.out0()?])?
            }
            "Squeeze" | "Unsqueeze" => {
                let axes = if v < 13 {
                    a.ints_opt("axes")?
                } else {
                    self.opt_i64s(cx, 1, "axes")?
                };
                let x = cx.req_input(0, "data")?;
                let o = if op == "Squeeze" {
                    Op::Squeeze {
                        axes: axes.unwrap_or_default(),
                    }
                } else {
                    Op::Unsqueeze {
                        axes: axes.ok_or_else(|| cx.invalid("axes are required"))?,
                    }
                };
                self.apply(cx, o, &[x], &[cx.out0()?])?
            }
            "Pad" => self.pad(cx, &mut a)?,
            "Gather" => self.gather(cx, &mut a)?,
            "Expand" => {
                let shape = self.const_i64s(cx, 1, "shape")?;
                let n = shape.iter().try_fold(1u128, |acc, &d| {
                    (d >= 0).then(|| acc.saturating_mul(d as u128))
                });
                if n.is_none_or(|n| n > MAX_ELEMENTS) {
                    return Err(cx.invalid(format!("shape {shape:?} is negative or too large")));
                }
                self.apply(
                    cx,
                    Op::Expand { shape },
                    &[cx.req_input(0, "input")?],
                    &[cx.out0()?],
                )?
            }
            "Identity" => {
                let x = cx.req_input(0, "input")?;
                self.alias(cx, x, &cx.out0()?, Op::Identity)?
            }
            "Dropout" => {
                let mut ratio = 0.5;
                let mut training = false;
                if v < 12 {
                    ratio = a.float("ratio", 0.5)?;
                } else {
                    if let Some(r) = self.opt_scalar_f32(cx, 1, "ratio")? {
                        ratio = r;
                    }
                    if cx.input(2).is_some() {
                        let t = self.need_const(cx, 2, "training_mode")?;
                        training = Known::new(t).f32s().first().is_some_and(|&b| b != 0.0);
                    }
                }
                // Training mode with ratio 0 drops nothing: still a pass-through.
                if training && ratio != 0.0 {
                    unsup!("training_mode=true is not supported; export the model in eval() mode");
                }
                a.take_any("seed");
                let x = cx.req_input(0, "data")?;
                if let Some(mask) = cx.extra_outputs().next() {
                    if self.consumed.contains(mask) {
                        // Nothing is dropped: the mask is all true (all
                        // ones before opset 10, where it had x's type).
                        let shape = self.ty(cx, x)?.shape;
                        if shape.iter().product::<usize>() > fold::FOLD_LIMIT {
                            unsup!(
                                "its mask output `{mask}` is used and too large to build at import"
                            );
                        }
                        let t = if v >= 10 {
                            Tensor::Bool(ArrayD::from_elem(IxDyn(&shape), true))
                        } else {
                            Tensor::F32(ArrayD::from_elem(IxDyn(&shape), 1.0))
                        };
                        let mask = mask.clone();
                        self.set_known(&mask, t);
                    }
                }
                self.alias(cx, x, &cx.out0()?, Op::Dropout { ratio })?
            }
            "Constant" => self.constant(cx, &mut a)?,
            "Shape" => {
                let ty = self.ty(cx, cx.req_input(0, "data")?)?;
                let r = ty.rank() as i64;
                let clampi = |x: i64| (if x < 0 { x + r } else { x }).clamp(0, r) as usize;
                let (s, e) = if v >= 15 {
                    (clampi(a.int("start", 0)?), clampi(a.int("end", r)?))
                } else {
                    (0, r as usize)
                };
                let dims: Vec<i64> = ty.shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
                self.set_known(&cx.out0()?, i64_tensor(&[dims.len()], dims))
            }
            "Size" => {
                let ty = self.ty(cx, cx.req_input(0, "data")?)?;
                let n = ty.shape.iter().product::<usize>() as i64;
                self.set_known(&cx.out0()?, i64_tensor(&[], vec![n]))
            }
            "ConstantOfShape" => {
                let shape = self.const_i64s(cx, 0, "input")?;
                let value = match a.tensor_opt("value")? {
                    None => Tensor::F32(ArrayD::zeros(IxDyn(&[1]))),
                    Some(tp) => match decode_tensor(&tp, &format!("{}.value", cx.label))? {
                        Decoded::Ok(k) => k.t,
                        Decoded::UnsupportedDtype(d) => {
                            unsup!("value of data type {d} is not supported")
                        }
                    },
                };
                let t = fold::constant_of_shape(&shape, &value).map_err(|m| cx.invalid(m))?;
                self.set_known(&cx.out0()?, t)
            }
            "Range" => {
                let s = self.need_const(cx, 0, "start")?;
                let l = self.need_const(cx, 1, "limit")?;
                let d = self.need_const(cx, 2, "delta")?;
                let t = fold::range(&s, &l, &d).map_err(|m| cx.invalid(m))?;
                self.set_known(&cx.out0()?, t)
            }
            "Cast" => {
                let to = a
                    .int_opt("to")?
                    .ok_or_else(|| cx.invalid("attribute `to` is required"))?;
                a.take_any("saturate");
                a.take_any("round_mode");
                let (dtype, orig) = match DataType::try_from(to as i32) {
                    Ok(DataType::Float) => (DType::F32, DataType::Float),
                    Ok(DataType::Double) => (DType::F32, DataType::Double),
                    Ok(DataType::Int64) => (DType::I64, DataType::Int64),
                    Ok(DataType::Int32) => (DType::I64, DataType::Int32),
                    Ok(DataType::Bool) => (DType::Bool, DataType::Bool),
                    _ => unsup!("casting to {} is not supported", dtype_name(to as i32)),
                };
                let x = cx.req_input(0, "input")?;
                let out = cx.out0()?;
                if let (true, Some(t)) = (self.is_foldable(x), self.tensor(x)) {
                    let t = fold::cast(t, dtype);
                    self.set_const(&out, t, orig);
                } else {
                    let ty = self.ty(cx, x)?;
                    if ty.dtype == dtype {
                        self.alias(cx, x, &out, Op::Identity)?
                    } else {
                        self.apply(cx, Op::Cast { to: dtype }, &[x], &[out])?
                    }
                }
            }
            "Less" | "Greater" | "And" | "Or" | "Not" => {
                let o = match op {
                    "Less" => Op::Compare(Compare::Less),
                    "Greater" => Op::Compare(Compare::Greater),
                    "And" => Op::Logical(Logical::And),
                    "Or" => Op::Logical(Logical::Or),
                    _ => Op::Not,
                };
                let n = if op == "Not" { 1 } else { 2 };
                let names: Vec<&str> = (0..n)
                    .map(|i| cx.req_input(i, "operand"))
                    .collect::<R<_>>()?;
                self.apply(cx, o, &names, &[cx.out0()?])?
            }
            "Equal" | "Where" => {
                let n = if op == "Equal" { 2 } else { 3 };
                let names: Vec<&str> = (0..n)
                    .map(|i| cx.req_input(i, "operand"))
                    .collect::<R<_>>()?;
                if !names.iter().all(|x| self.is_foldable(x)) {
                    let o = if op == "Equal" {
                        Op::Compare(Compare::Equal)
                    } else {
                        Op::Where
                    };
                    self.apply(cx, o, &names, &[cx.out0()?])?;
                    a.finish(op)?;
                    return Ok(());
                }
                let ts: Vec<Tensor> = names
                    .iter()
                    .filter_map(|x| self.tensor(x).cloned())
                    .collect();
                let r = if op == "Equal" {
                    fold::equal(&ts[0], &ts[1])
                } else {
                    fold::where_(&ts[0], &ts[1], &ts[2])
                }
                .map_err(|m| cx.invalid(m))?;
                self.set_known(&cx.out0()?, r)
            }
            "Mod" => {
                // Folded at import only: exporters emit it on shapes
                // (torchvision's ViT attention).
                let fmod = a.int("fmod", 0)?;
                if !(0..=1).contains(&fmod) {
                    return Err(cx.invalid(format!("fmod must be 0 or 1, found {fmod}")));
                }
                let (x, y) = (cx.req_input(0, "A")?, cx.req_input(1, "B")?);
                if !self.is_foldable(x) || !self.is_foldable(y) {
                    unsup!("Mod of runtime values is not supported (dnnc folds Mod of import-time constants only)");
                }
                let (Some(tx), Some(ty)) = (self.tensor(x), self.tensor(y)) else {
                    unsup!("Mod of runtime values is not supported (dnnc folds Mod of import-time constants only)");
                };
                let r = fold::modulo(tx, ty, fmod == 1).map_err(|m| cx.invalid(m))?;
                self.set_known(&cx.out0()?, r)
            }
            "Tile" => {
                let x = cx.req_input(0, "input")?;
                let reps = self.const_i64s(cx, 1, "repeats")?;
                if reps.iter().any(|&r| !(0..=MAX_ATTR).contains(&r)) {
                    return Err(cx.invalid(format!("repeats {reps:?} must be non-negative")));
                }
                let repeats = reps.into_iter().map(|r| r as usize).collect();
                self.apply(cx, Op::Tile { repeats }, &[x], &[cx.out0()?])?
            }
            "PRelu" => {
                let (x, slope) = (cx.req_input(0, "X")?, cx.req_input(1, "slope")?);
                self.apply(cx, Op::PRelu, &[x, slope], &[cx.out0()?])?
            }
            "Einsum" => {
                let eq = a.string("equation", "")?;
                if eq.is_empty() {
                    return Err(cx.invalid("attribute `equation` is required"));
                }
                let equation: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
                let ins: Vec<&str> =
                    cx.p.input
                        .iter()
                        .filter(|s| !s.is_empty())
                        .map(|s| s.as_str())
                        .collect();
                self.apply(cx, Op::Einsum { equation }, &ins, &[cx.out0()?])?
            }
            "InstanceNormalization" => {
                let epsilon = a.float("epsilon", 1e-5)?;
                let ins = [
                    cx.req_input(0, "input")?,
                    cx.req_input(1, "scale")?,
                    cx.req_input(2, "B")?,
                ];
                self.apply(
                    cx,
                    Op::InstanceNormalization { epsilon },
                    &ins,
                    &[cx.out0()?],
                )?
            }
            "LayerNormalization" => self.layer_norm(cx, &mut a)?,
            "ConvTranspose" => self.conv_transpose(cx, &mut a)?,
            "Resize" | "Upsample" => self.resize(cx, &mut a)?,
            "RNN" | "GRU" | "LSTM" => self.recurrent(cx, &mut a)?,
            other => unsup!("op `{other}` is not supported by dnnc"),
        }
        a.finish(op)?;
        Ok(())
    }

    fn constant(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let out = cx.out0()?;
        let (t, orig) = if let Some(tp) = a.tensor_opt("value")? {
            match decode_tensor(&tp, &out)? {
                Decoded::Ok(k) => (k.t, k.orig),
                Decoded::UnsupportedDtype(d) => {
                    unsup!("a Constant of data type {d} is not supported")
                }
            }
        } else if let Some(f) = a.float_opt("value_float")? {
            (
                Tensor::F32(ArrayD::from_elem(IxDyn(&[]), f)),
                DataType::Float,
            )
        } else if let Some(fs) = a.floats_opt("value_floats")? {
            let n = fs.len();
            (
                Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[n]), fs).expect("1-D")),
                DataType::Float,
            )
        } else if let Some(i) = a.int_opt("value_int")? {
            (i64_tensor(&[], vec![i]), DataType::Int64)
        } else if let Some(is) = a.ints_opt("value_ints")? {
            let n = is.len();
            (i64_tensor(&[n], is), DataType::Int64)
        } else if a.has("sparse_value") {
            unsup!("sparse Constant values are not supported")
        } else if a.has("value_string") || a.has("value_strings") {
            unsup!("string Constants are not supported")
        } else {
            return Err(cx.invalid("has no value attribute"));
        };
        self.set_const(&out, t, orig);
        Ok(())
    }

    fn conv(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let x = cx.req_input(0, "X")?;
        let w = cx.req_input(1, "W")?;
        let (xt, wt) = (self.ty(cx, x)?, self.ty(cx, w)?);
        if xt.rank() != 4 {
            unsup!("only 2-D convolution (NCHW input) is supported; input `{x}` is {xt}");
        }
        if wt.rank() != 4 {
            return Err(cx.invalid(format!(
                "weight `{w}` is {wt}; a 2-D convolution needs rank 4"
            )));
        }
        let kernel = [wt.shape[2], wt.shape[3]];
        if kernel.contains(&0) {
            return Err(cx.invalid(format!("weight `{w}` {wt} has an empty kernel")));
        }
        if let Some(k) = a.ints_opt("kernel_shape")? {
            if k.len() != 2
                || k[0] as usize != kernel[0]
                || k[1] as usize != kernel[1]
                || k.iter().any(|&d| d < 0)
            {
                return Err(cx.invalid(format!(
                    "kernel_shape {k:?} does not match the weight `{w}` {wt}"
                )));
            }
        }
        let strides = pos2(cx, a, "strides")?;
        let dilations = pos2(cx, a, "dilations")?;
        let group = a.int("group", 1)?;
        if !(1..=MAX_ATTR).contains(&group) {
            return Err(cx.invalid(format!("group must be positive, found {group}")));
        }
        let pads = spatial_pads(cx, a, &xt.shape[2..], kernel, strides, dilations)?;
        let op = Op::Conv2d(Conv2d {
            strides,
            pads,
            dilations,
            group: group as usize,
            ..Conv2d::default()
        });
        let mut ins = vec![x, w];
        if let Some(b) = cx.input(2) {
            ins.push(b);
        }
        self.apply(cx, op, &ins, &[cx.out0()?])
    }

    fn pool(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let max = cx.op == "MaxPool";
        let v = self.opset;
        let x = cx.req_input(0, "X")?;
        let xt = self.ty(cx, x)?;
        if max && cx.extra_outputs().next().is_some() {
            unsup!("the Indices output of MaxPool is not supported");
        }
        if xt.rank() != 4 {
            unsup!("only 2-D pooling (NCHW input) is supported; input `{x}` is {xt}");
        }
        let k = a
            .ints_opt("kernel_shape")?
            .ok_or_else(|| cx.invalid("attribute `kernel_shape` is required"))?;
        if k.len() != 2 || k.iter().any(|&d| !(1..=MAX_ATTR).contains(&d)) {
            return Err(cx.invalid(format!("kernel_shape {k:?} must be two positive sizes")));
        }
        let kernel = [k[0] as usize, k[1] as usize];
        let strides = pos2(cx, a, "strides")?;
        let dilations = if max || v >= 19 {
            pos2(cx, a, "dilations")?
        } else {
            [1, 1]
        };
        if !max && dilations != [1, 1] {
            unsup!("AveragePool with dilations {dilations:?} is not supported");
        }
        if max && v >= 8 && a.int("storage_order", 0)? != 0 {
            // Only affects the Indices output, which is rejected above.
        }
        let ceil_mode = if v >= 10 {
            a.flag("ceil_mode", false)?
        } else {
            false
        };
        let count_include_pad = if max {
            false
        } else {
            a.flag("count_include_pad", false)?
        };
        let pads = spatial_pads(cx, a, &xt.shape[2..], kernel, strides, dilations)?;
        for (i, &p) in pads.iter().enumerate() {
            let extent = (kernel[i % 2] - 1) * dilations[i % 2] + 1;
            if p >= extent {
                return Err(cx.invalid(format!(
                    "pads {pads:?} must be smaller than the window {kernel:?}"
                )));
            }
        }
        let p = Pool2d {
            kernel,
            strides,
            pads,
            dilations,
            ceil_mode,
            count_include_pad,
            data: dnnc_ir::op::DataLayout::Nchw,
        };
        let op = if max {
            Op::MaxPool(p)
        } else {
            Op::AveragePool(p)
        };
        self.apply(cx, op, &[x], &[cx.out0()?])
    }

    fn softmax(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let log = cx.op == "LogSoftmax";
        let make = |axis: i64| {
            if log {
                Op::LogSoftmax { axis }
            } else {
                Op::Softmax { axis }
            }
        };
        let x = cx.req_input(0, "input")?;
        let out = cx.out0()?;
        if self.opset >= 13 {
            let axis = a.int("axis", -1)?;
            return self.apply(cx, make(axis), &[x], &[out]);
        }
        // Opset < 13: coerce to 2-D at `axis`, softmax rows, restore shape.
        let xt = self.ty(cx, x)?;
        let r = xt.rank() as i64;
        let axis = a.int("axis", 1)?;
        if axis < -r || axis > r {
            return Err(cx.invalid(format!("axis {axis} is out of range for {xt}")));
        }
        let ax = if axis < 0 { axis + r } else { axis };
        if ax == r - 1 {
            return self.apply(cx, make(-1), &[x], &[out]);
        }
        let flat = self.fresh(&out);
        let soft = self.fresh(&out);
        self.apply(
            cx,
            Op::Flatten { axis: ax },
            &[x],
            std::slice::from_ref(&flat),
        )?;
        self.apply(cx, make(1), &[&flat], std::slice::from_ref(&soft))?;
        let shape = xt.shape.iter().map(|&d| d as i64).collect();
        self.apply(cx, Op::Reshape { shape }, &[&soft], &[out])
    }

    fn split(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let v = self.opset;
        let x = cx.req_input(0, "input")?;
        let xt = self.ty(cx, x)?;
        let axis = a.int("axis", 0)?;
        let ax = norm_axis(axis, xt.rank()).map_err(|m| cx.invalid(m))?;
        let dim = xt.shape[ax] as i64;
        let n_out = cx.p.output.len();
        if n_out == 0 {
            return Err(cx.invalid("has no outputs"));
        }
        let split = if v >= 13 {
            self.opt_i64s(cx, 1, "split")?
        } else {
            a.ints_opt("split")?
        };
        let num_outputs = if v >= 18 {
            a.int_opt("num_outputs")?
        } else {
            None
        };
        let sizes: Vec<i64> = match (split, num_outputs) {
            (Some(s), _) => s,
            (None, Some(k)) => {
                if k != n_out as i64 {
                    return Err(cx.invalid(format!(
                        "num_outputs is {k} but the node has {n_out} outputs"
                    )));
                }
                let chunk = (dim + k - 1) / k;
                let last = dim - chunk * (k - 1);
                if last < 0 {
                    return Err(
                        cx.invalid(format!("cannot split {dim} into {k} chunks of {chunk}"))
                    );
                }
                let mut s = vec![chunk; k as usize - 1];
                s.push(last);
                s
            }
            (None, None) => {
                if dim % n_out as i64 != 0 {
                    return Err(cx.invalid(format!(
                        "axis {ax} of {xt} does not split evenly into {n_out} outputs"
                    )));
                }
                vec![dim / n_out as i64; n_out]
            }
        };
        if sizes.len() != n_out || sizes.iter().any(|&s| s < 0 || s > dim) {
            return Err(cx.invalid(format!(
                "split sizes {sizes:?} do not fit {n_out} outputs of axis size {dim}"
            )));
        }
        let mut outs = vec![];
        for o in &cx.p.output {
            outs.push(if o.is_empty() {
                self.fresh("split")
            } else {
                o.clone()
            });
        }
        let op = Op::Split {
            axis,
            split: sizes.into_iter().map(|s| s as usize).collect(),
        };
        self.apply(cx, op, &[x], &outs)
    }

    fn slice(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let x = cx.req_input(0, "data")?;
        let (starts, ends, axes, steps) = if self.opset < 10 {
            let s = a
                .ints_opt("starts")?
                .ok_or_else(|| cx.invalid("attribute `starts` is required"))?;
            let e = a
                .ints_opt("ends")?
                .ok_or_else(|| cx.invalid("attribute `ends` is required"))?;
            (s, e, a.ints_opt("axes")?, None)
        } else {
            (
                self.const_i64s(cx, 1, "starts")?,
                self.const_i64s(cx, 2, "ends")?,
                self.opt_i64s(cx, 3, "axes")?,
                self.opt_i64s(cx, 4, "steps")?,
            )
        };
        let n = starts.len();
        let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; n]);
        if ends.len() != n || axes.len() != n || steps.len() != n {
            return Err(cx.invalid(format!(
                "starts, ends, axes and steps differ in length ({n}, {}, {}, {})",
                ends.len(),
                axes.len(),
                steps.len()
            )));
        }
        if steps.contains(&0) {
            return Err(cx.invalid("a slice step cannot be 0"));
        }
        // Dimensions are at most 2^40, so clamping changes nothing but keeps
        // index arithmetic in range.
        const B: i64 = 1 << 41;
        let c = |v: &Vec<i64>| v.iter().map(|&x| x.clamp(-B, B)).collect::<Vec<_>>();
        let op = Op::Slice {
            starts: c(&starts),
            ends: c(&ends),
            axes,
            steps: c(&steps),
        };
        self.apply(cx, op, &[x], &[cx.out0()?])
    }

    fn pad(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let v = self.opset;
        let mode = match a.string("mode", "constant")?.as_str() {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" => unsup!("mode `wrap` is not supported (constant, reflect, edge)"),
            other => return Err(cx.invalid(format!("unknown mode `{other}`"))),
        };
        let x = cx.req_input(0, "data")?;
        let rank = self.ty(cx, x)?.rank();
        let (mut pads, value, axes) = if v < 11 {
            let p = a
                .ints_opt("pads")?
                .ok_or_else(|| cx.invalid("attribute `pads` is required"))?;
            (p, a.float("value", 0.0)?, None)
        } else {
            let p = self.const_i64s(cx, 1, "pads")?;
            let value = self.opt_scalar_f32(cx, 2, "constant_value")?.unwrap_or(0.0);
            let axes = if v >= 18 {
                self.opt_i64s(cx, 3, "axes")?
            } else {
                None
            };
            (p, value, axes)
        };
        if let Some(axes) = axes {
            if pads.len() != 2 * axes.len() {
                return Err(cx.invalid(format!(
                    "pads {pads:?} need two entries per axis of {axes:?}"
                )));
            }
            let mut full = vec![0; 2 * rank];
            for (k, &ax) in axes.iter().enumerate() {
                let i = norm_axis(ax, rank).map_err(|m| cx.invalid(m))?;
                full[i] = pads[k];
                full[i + rank] = pads[k + axes.len()];
            }
            pads = full;
        }
        if pads.iter().any(|p| p.abs() > MAX_ATTR) {
            return Err(cx.invalid(format!("pads {pads:?} are out of range")));
        }
        self.apply(cx, Op::Pad { pads, mode, value }, &[x], &[cx.out0()?])
    }

    fn input_rank(&self, cx: &Ctx) -> Option<usize> {
        let x = cx.input(0)?;
        self.ty(cx, x).ok().map(|t| t.rank())
    }

    /// Conv, ConvTranspose and pooling over 1-D data (`[N, C, L]`): the
    /// 2-D op on `[N, C, 1, L]` with unit-height windows (the node's
    /// attributes get a leading 1 / 0 entry), then the axis is dropped.
    fn as_2d(&mut self, cx: &Ctx) -> R<()> {
        let mut p = cx.p.clone();
        let out = cx.out0()?;
        let unsqueeze = Op::Unsqueeze { axes: vec![2] };
        let weights = matches!(cx.op, "Conv" | "ConvTranspose");
        for i in 0..if weights { 2 } else { 1 } {
            let name = cx.req_input(i, if i == 0 { "X" } else { "W" })?;
            if self.ty(cx, name)?.rank() != 3 {
                return Err(
                    cx.invalid(format!("input `{name}` must have rank 3 like the 1-D data"))
                );
            }
            let t = self.fresh(name);
            self.apply(cx, unsqueeze.clone(), &[name], std::slice::from_ref(&t))?;
            p.input[i] = t;
        }
        let out2 = self.fresh(&out);
        p.output[0] = out2.clone();
        for at in p.attribute.iter_mut() {
            let lead = match at.name() {
                "kernel_shape" | "strides" | "dilations" | "output_shape" => 1,
                "output_padding" => 0,
                "pads" if at.ints.len() == 2 => {
                    at.ints = vec![0, at.ints[0], 0, at.ints[1]];
                    continue;
                }
                _ => continue,
            };
            if at.ints.len() == 1 {
                at.ints.insert(0, lead);
            }
        }
        let cx2 = Ctx {
            p: &p,
            label: cx.label.clone(),
            op: cx.op,
        };
        let mut a = Attrs::new(&p.attribute)?;
        match cx.op {
            "Conv" => self.conv(&cx2, &mut a)?,
            "ConvTranspose" => self.conv_transpose(&cx2, &mut a)?,
            _ => self.pool(&cx2, &mut a)?,
        }
        a.finish(cx.op)?;
        self.apply(cx, Op::Squeeze { axes: vec![2] }, &[&out2], &[out])
    }

    /// LayerNormalization: the IR op gives `Y`; the optional `Mean` and
    /// `InvStdDev` outputs are rebuilt from reductions when something reads
    /// them.
    fn layer_norm(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let axis = a.int("axis", -1)?;
        let epsilon = a.float("epsilon", 1e-5)?;
        a.take_any("stash_type");
        let x = cx.req_input(0, "X")?;
        let mut ins = vec![x, cx.req_input(1, "Scale")?];
        if let Some(b) = cx.input(2) {
            ins.push(b);
        }
        let out = cx.out0()?;
        self.apply(cx, Op::LayerNormalization { axis, epsilon }, &ins, &[out])?;
        let named = |i: usize| cx.p.output.get(i).filter(|s| !s.is_empty()).cloned();
        let (mean_out, inv_out) = (named(1), named(2));
        if mean_out.is_none() && inv_out.is_none() {
            return Ok(());
        }
        let rank = self.ty(cx, x)?.rank();
        let ax = norm_axis(axis, rank).map_err(|m| cx.invalid(m))?;
        let axes: Vec<i64> = (ax as i64..rank as i64).collect();
        let mean_op = Op::Reduce {
            kind: ReduceKind::Mean,
            axes,
            keepdims: true,
        };
        let mean = mean_out.clone().unwrap_or_else(|| self.fresh("mean"));
        self.apply(cx, mean_op.clone(), &[x], std::slice::from_ref(&mean))?;
        let Some(inv) = inv_out else {
            return Ok(());
        };
        let d = self.fresh(&inv);
        self.apply(
            cx,
            Op::Binary(Binary::Sub),
            &[x, &mean],
            std::slice::from_ref(&d),
        )?;
        let sq = self.fresh(&inv);
        self.apply(
            cx,
            Op::Binary(Binary::Mul),
            &[&d, &d],
            std::slice::from_ref(&sq),
        )?;
        let var = self.fresh(&inv);
        self.apply(cx, mean_op, &[&sq], std::slice::from_ref(&var))?;
        let eps = self.fresh(&inv);
        self.set_known(&eps, f32_scalar(epsilon));
        let ve = self.fresh(&inv);
        self.apply(
            cx,
            Op::Binary(Binary::Add),
            &[&var, &eps],
            std::slice::from_ref(&ve),
        )?;
        let sd = self.fresh(&inv);
        self.apply(
            cx,
            Op::Unary(Unary::Sqrt),
            &[&ve],
            std::slice::from_ref(&sd),
        )?;
        self.apply(cx, Op::Unary(Unary::Reciprocal), &[&sd], &[inv])
    }

    /// ConvTranspose: `auto_pad` and `output_shape` become explicit pads and
    /// output padding.
    fn conv_transpose(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let x = cx.req_input(0, "X")?;
        let w = cx.req_input(1, "W")?;
        let (xt, wt) = (self.ty(cx, x)?, self.ty(cx, w)?);
        if xt.rank() != 4 {
            unsup!(
                "only 2-D transposed convolution (NCHW input) is supported; input `{x}` is {xt}"
            );
        }
        if wt.rank() != 4 {
            return Err(cx.invalid(format!(
                "weight `{w}` is {wt}; a 2-D transposed convolution needs rank 4"
            )));
        }
        let kernel = [wt.shape[2], wt.shape[3]];
        if kernel.contains(&0) {
            return Err(cx.invalid(format!("weight `{w}` {wt} has an empty kernel")));
        }
        if let Some(k) = a.ints_opt("kernel_shape")? {
            if k.len() != 2 || k[0] != kernel[0] as i64 || k[1] != kernel[1] as i64 {
                return Err(cx.invalid(format!(
                    "kernel_shape {k:?} does not match the weight `{w}` {wt}"
                )));
            }
        }
        let strides = pos2(cx, a, "strides")?;
        let dilations = pos2(cx, a, "dilations")?;
        let group = a.int("group", 1)?;
        if !(1..=MAX_ATTR).contains(&group) {
            return Err(cx.invalid(format!("group must be positive, found {group}")));
        }
        let mut opad = match a.ints_opt("output_padding")? {
            None => [0, 0],
            Some(v) if v.len() == 2 && v.iter().all(|p| (0..=MAX_ATTR).contains(p)) => {
                [v[0] as usize, v[1] as usize]
            }
            Some(v) => {
                return Err(cx.invalid(format!(
                    "output_padding {v:?} must be two non-negative values"
                )))
            }
        };
        let auto = a.string("auto_pad", "NOTSET")?;
        let explicit = a.ints_opt("pads")?;
        let output_shape = a.ints_opt("output_shape")?;
        let input = [xt.shape[2], xt.shape[3]];
        let target: Option<[usize; 2]> = match (&output_shape, auto.as_str()) {
            (Some(os), _) => {
                // Spatial sizes; a full [N, C, H, W] shape is accepted too.
                let sp = &os[os.len().saturating_sub(2)..];
                if sp.len() != 2 || sp.iter().any(|d| !(1..=MAX_ATTR).contains(d)) {
                    return Err(cx.invalid(format!(
                        "output_shape {os:?} must end in two positive sizes"
                    )));
                }
                Some([sp[0] as usize, sp[1] as usize])
            }
            (None, "SAME_UPPER" | "SAME_LOWER") => {
                Some([input[0] * strides[0], input[1] * strides[1]])
            }
            (None, "NOTSET" | "VALID") => None,
            (None, other) => {
                unsup!(
                    "auto_pad `{other}` is not supported (NOTSET, SAME_UPPER, SAME_LOWER, VALID)"
                )
            }
        };
        let mut pads = [0usize; 4];
        match target {
            Some(t) => {
                for i in 0..2 {
                    let full = strides[i] * input[i].saturating_sub(1)
                        + opad[i]
                        + (kernel[i] - 1) * dilations[i]
                        + 1;
                    if full >= t[i] {
                        let total = full - t[i];
                        let (small, big) = (total / 2, total - total / 2);
                        let (b, e) = if auto == "SAME_UPPER" {
                            (small, big)
                        } else {
                            (big, small)
                        };
                        pads[i] = b;
                        pads[i + 2] = e;
                    } else {
                        // A larger requested output extends the end.
                        opad[i] += t[i] - full;
                    }
                }
            }
            None if auto == "VALID" => {}
            None => {
                if let Some(p) = explicit {
                    if p.len() != 4 || p.iter().any(|x| !(0..=MAX_ATTR).contains(x)) {
                        return Err(
                            cx.invalid(format!("pads {p:?} must be four non-negative values"))
                        );
                    }
                    pads = [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize];
                }
            }
        }
        let op = Op::ConvTranspose2d(ConvTranspose2d {
            strides,
            pads,
            dilations,
            group: group as usize,
            output_padding: opad,
        });
        let mut ins = vec![x, w];
        if let Some(b) = cx.input(2) {
            ins.push(b);
        }
        self.apply(cx, op, &ins, &[cx.out0()?])
    }

    /// A constant input as f32 values, or `None` when absent or empty (how
    /// Resize marks an unused `scales` / `sizes`).
    fn opt_f32s(&self, cx: &Ctx, i: usize, what: &str) -> R<Option<Vec<f32>>> {
        if cx.input(i).is_none() {
            return Ok(None);
        }
        let v = Known::new(self.need_const(cx, i, what)?).f32s();
        Ok((!v.is_empty()).then_some(v))
    }

    /// Resize (opset 10+) and Upsample (opset 7-9) with constant scales or
    /// sizes, to the static IR Resize.
    fn resize(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let v = self.opset;
        let upsample = cx.op == "Upsample";
        let x = cx.req_input(0, "X")?;
        let xt = self.ty(cx, x)?;
        let rank = xt.rank();
        let mode = match a.string("mode", "nearest")?.as_str() {
            "nearest" => ResizeMode::Nearest,
            "linear" | "bilinear" => ResizeMode::Linear,
            "cubic" => unsup!("mode `cubic` is not supported (nearest, linear)"),
            other => return Err(cx.invalid(format!("unknown mode `{other}`"))),
        };
        // Upsample and opset-10 Resize: x_in = x_out / scale, nearest floors.
        let (mut coord, mut nearest) = (CoordMode::Asymmetric, NearestMode::Floor);
        let (mut axes, mut policy) = (None, "stretch".to_string());
        if !upsample && v >= 11 {
            coord = match a.string("coordinate_transformation_mode", "half_pixel")?.as_str() {
                "half_pixel" => CoordMode::HalfPixel,
                "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
                "align_corners" => CoordMode::AlignCorners,
                "asymmetric" => CoordMode::Asymmetric,
                other => unsup!("coordinate_transformation_mode `{other}` is not supported (half_pixel, pytorch_half_pixel, align_corners, asymmetric)"),
            };
            nearest = match a.string("nearest_mode", "round_prefer_floor")?.as_str() {
                "round_prefer_floor" => NearestMode::RoundPreferFloor,
                "round_prefer_ceil" => NearestMode::RoundPreferCeil,
                "floor" => NearestMode::Floor,
                "ceil" => NearestMode::Ceil,
                other => return Err(cx.invalid(format!("unknown nearest_mode `{other}`"))),
            };
            a.take_any("cubic_coeff_a");
            a.take_any("exclude_outside");
            a.take_any("extrapolation_value");
            if v >= 18 {
                if a.int("antialias", 0)? != 0 {
                    unsup!("antialias=1 is not supported");
                }
                axes = a.ints_opt("axes")?;
                policy = a.string("keep_aspect_ratio_policy", "stretch")?;
            }
        }
        let (scales, sizes) = if upsample && v < 9 {
            let s = a
                .floats_opt("scales")?
                .ok_or_else(|| cx.invalid("attribute `scales` is required"))?;
            (Some(s), None)
        } else if upsample || v < 11 {
            (self.opt_f32s(cx, 1, "scales")?, None)
        } else {
            (
                self.opt_f32s(cx, 2, "scales")?,
                self.opt_i64s(cx, 3, "sizes")?.filter(|s| !s.is_empty()),
            )
        };
        // Axes the scales/sizes refer to (all by default).
        let axes: Vec<usize> = match axes {
            None => (0..rank).collect(),
            Some(ax) => ax
                .iter()
                .map(|&i| norm_axis(i, rank))
                .collect::<Result<_, _>>()
                .map_err(|m| cx.invalid(m))?,
        };
        let mut out: Vec<usize> = xt.shape.clone();
        let mut full_scales: Vec<f32> = vec![1.0; rank];
        let sizes_stretch = sizes.is_some() && policy == "stretch";
        match (scales, sizes) {
            (_, Some(sz)) => {
                if sz.len() != axes.len() || sz.iter().any(|&d| !(0..=MAX_ATTR).contains(&d)) {
                    return Err(cx.invalid(format!(
                        "sizes {sz:?} must be {} non-negative sizes",
                        axes.len()
                    )));
                }
                match policy.as_str() {
                    "stretch" => {
                        for (&ax, &d) in axes.iter().zip(&sz) {
                            out[ax] = d as usize;
                            full_scales[ax] = d as f32 / xt.shape[ax].max(1) as f32;
                        }
                    }
                    "not_larger" | "not_smaller" => {
                        let ratios = axes
                            .iter()
                            .zip(&sz)
                            .map(|(&ax, &d)| d as f32 / xt.shape[ax].max(1) as f32);
                        let scale = if policy == "not_larger" {
                            ratios.fold(f32::INFINITY, f32::min)
                        } else {
                            ratios.fold(0.0, f32::max)
                        };
                        for &ax in &axes {
                            out[ax] = round_half_even(scale as f64 * xt.shape[ax] as f64) as usize;
                            full_scales[ax] = scale;
                        }
                    }
                    other => {
                        return Err(
                            cx.invalid(format!("unknown keep_aspect_ratio_policy `{other}`"))
                        )
                    }
                }
            }
            (Some(sc), None) => {
                if sc.len() != axes.len() || sc.iter().any(|&f| !(f > 0.0 && f < 1e6)) {
                    return Err(cx.invalid(format!(
                        "scales {sc:?} must be {} positive factors",
                        axes.len()
                    )));
                }
                for (&ax, &f) in axes.iter().zip(&sc) {
                    out[ax] = (f as f64 * xt.shape[ax] as f64).floor() as usize;
                    full_scales[ax] = f;
                }
            }
            (None, None) => return Err(cx.invalid("needs either scales or sizes")),
        }
        let n = out
            .iter()
            .fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
        if n > MAX_ELEMENTS {
            return Err(cx.invalid(format!("output shape {out:?} is too large")));
        }
        // Stretched sizes: the coordinate transform uses sizes / in (empty
        // scales); given scales (and aspect-ratio scales) are kept as is.
        if sizes_stretch {
            full_scales.clear();
        }
        let op = Op::Resize(Resize {
            sizes: out,
            scales: full_scales,
            mode,
            coord,
            nearest,
        });
        self.apply(cx, op, &[x], &[cx.out0()?])
    }

    /// A known all-zero f32 tensor, for omitted optional inputs.
    fn zeros(&mut self, cx: &Ctx, base: &str, shape: &[usize]) -> R<String> {
        let n = shape
            .iter()
            .fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
        if n > fold::FOLD_LIMIT as u128 {
            return Err(cx.invalid(format!(
                "the default (zero) `{base}` of shape {shape:?} would be too large"
            )));
        }
        let name = self.fresh(base);
        self.set_known(&name, Tensor::F32(ArrayD::zeros(IxDyn(shape))));
        Ok(name)
    }

    /// RNN, GRU and LSTM (layout 0) to the IR recurrent layer; omitted B,
    /// initial_h and initial_c become zeros.
    fn recurrent(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let cell = match cx.op {
            "RNN" => CellKind::Rnn,
            "GRU" => CellKind::Gru {
                linear_before_reset: a.flag("linear_before_reset", false)?,
            },
            _ => CellKind::Lstm {
                input_forget: a.flag("input_forget", false)?,
            },
        };
        let lstm = matches!(cell, CellKind::Lstm { .. });
        // layout 1: X, states and results are batch-major; transpose
        // around the sequence-major IR layer.
        let batch_major = match a.int("layout", 0)? {
            0 => false,
            1 => true,
            l => return Err(cx.invalid(format!("layout {l} must be 0 or 1"))),
        };
        let swap01 = Op::Transpose {
            perm: vec![1, 0, 2],
        };
        let direction = match a.string("direction", "forward")?.as_str() {
            "forward" => RnnDirection::Forward,
            "reverse" => RnnDirection::Reverse,
            "bidirectional" => RnnDirection::Bidirectional,
            other => return Err(cx.invalid(format!("unknown direction `{other}`"))),
        };
        let mut x = cx.req_input(0, "X")?.to_string();
        let w = cx.req_input(1, "W")?;
        let r = cx.req_input(2, "R")?;
        if batch_major {
            let t = self.fresh(&x);
            self.apply(cx, swap01.clone(), &[&x], std::slice::from_ref(&t))?;
            x = t;
        }
        let (xt, rt) = (self.ty(cx, &x)?, self.ty(cx, r)?);
        if xt.rank() != 3 || rt.rank() != 3 {
            return Err(cx.invalid(format!("X {xt} and R {rt} must have rank 3")));
        }
        let dirs = direction.count();
        let hidden = match a.int_opt("hidden_size")? {
            Some(h) if (1..=MAX_ATTR).contains(&h) => h as usize,
            Some(h) => return Err(cx.invalid(format!("hidden_size {h} must be positive"))),
            None => rt.shape[2],
        };
        let (seq, batch) = (xt.shape[0], xt.shape[1]);
        let clip = match a.float_opt("clip")? {
            None => f32::INFINITY,
            Some(c) if c > 0.0 => c,
            Some(c) => return Err(cx.invalid(format!("clip {c} must be positive"))),
        };
        let alphas = a.floats_opt("activation_alpha")?.unwrap_or_default();
        let betas = a.floats_opt("activation_beta")?.unwrap_or_default();
        let activations = match a.strings_opt("activations")? {
            None => cell.default_activations().repeat(dirs),
            Some(names) => {
                let (mut ai, mut bi) = (0, 0);
                let mut acts = vec![];
                for name in &names {
                    acts.push(match name.as_str() {
                        "Relu" => RnnActivation::Relu,
                        "Tanh" => RnnActivation::Tanh,
                        "Sigmoid" => RnnActivation::Sigmoid,
                        "HardSigmoid" => {
                            let alpha = alphas.get(ai).copied().unwrap_or(0.2);
                            let beta = betas.get(bi).copied().unwrap_or(0.5);
                            ai += 1;
                            bi += 1;
                            RnnActivation::HardSigmoid { alpha, beta }
                        }
                        other => unsup!(
                            "activation `{other}` is not supported (Relu, Tanh, Sigmoid, HardSigmoid)"
                        ),
                    });
                }
                acts
            }
        };
        let g = cell.gates();
        let b = match cx.input(3) {
            Some(b) => b.to_string(),
            None => self.zeros(cx, "B", &[dirs, 2 * g * hidden])?,
        };
        if cx.input(4).is_some() {
            let lens = self.const_i64s(cx, 4, "sequence_lens")?;
            if lens.iter().any(|&l| l != seq as i64) {
                unsup!("sequence_lens {lens:?} differ from the sequence length {seq}; dnnc runs every batch entry over the whole sequence");
            }
        }
        let state = |imp: &mut Importer, i: usize, what: &str| -> R<String> {
            match cx.input(i) {
                Some(h) if batch_major => {
                    let t = imp.fresh(h);
                    imp.apply(cx, swap01.clone(), &[h], std::slice::from_ref(&t))?;
                    Ok(t)
                }
                Some(h) => Ok(h.to_string()),
                None => imp.zeros(cx, what, &[dirs, batch, hidden]),
            }
        };
        let h0 = state(self, 5, "initial_h")?;
        let mut ins: Vec<String> = vec![x, w.into(), r.into(), b, h0];
        if lstm {
            ins.push(state(self, 6, "initial_c")?);
            if let Some(p) = cx.input(7) {
                ins.push(p.to_string());
            }
        }
        let n_out = if lstm { 3 } else { 2 };
        let mut outs = vec![];
        let mut transposed = vec![];
        for i in 0..n_out {
            outs.push(match cx.p.output.get(i).filter(|s| !s.is_empty()) {
                Some(o) if batch_major => {
                    let t = self.fresh(o);
                    transposed.push((t.clone(), o.clone(), i));
                    t
                }
                Some(o) => o.clone(),
                None => self.fresh(cx.op),
            });
        }
        let op = Op::Recurrent(Recurrent {
            cell,
            hidden_size: hidden,
            direction,
            activations,
            clip,
        });
        let refs: Vec<&str> = ins.iter().map(|s| s.as_str()).collect();
        self.apply(cx, op, &refs, &outs)?;
        for (from, to, i) in transposed {
            // Y [seq, dirs, batch, h] -> [batch, seq, dirs, h]; states
            // [dirs, batch, h] -> [batch, dirs, h].
            let perm = if i == 0 {
                vec![2, 0, 1, 3]
            } else {
                vec![1, 0, 2]
            };
            self.apply(cx, Op::Transpose { perm }, &[&from], &[to])?;
        }
        Ok(())
    }

    fn gather(&mut self, cx: &Ctx, a: &mut Attrs) -> R<()> {
        let axis = a.int("axis", 0)?;
        let x = cx.req_input(0, "data")?;
        let mut idx = cx.req_input(1, "indices")?.to_string();
        let xt = self.ty(cx, x)?;
        let ax = norm_axis(axis, xt.rank()).map_err(|m| cx.invalid(m))?;
        if let Some(t) = self.tensor(&idx) {
            let dim = xt.shape[ax] as i64;
            let Tensor::I64(ix) = t else {
                return Err(cx.invalid(format!("indices must be integers, found {}", t.ty())));
            };
            if let Some(bad) = ix.iter().find(|&&i| i < -dim || i >= dim) {
                return Err(
                    cx.invalid(format!("index {bad} is out of range for axis {ax} of {xt}"))
                );
            }
            if ix.iter().any(|&i| i < 0) {
                let fixed = ix.mapv(|i| if i < 0 { i + dim } else { i });
                let name = self.fresh(&idx);
                self.set_known(&name, Tensor::I64(fixed));
                idx = name;
            }
        }
        self.apply(cx, Op::Gather { axis }, &[x, &idx], &[cx.out0()?])
    }
}

/// numpy's `round`: halves go to the even neighbour.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

fn f32_scalar(v: f32) -> Tensor {
    Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v))
}

fn i64_tensor(shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::I64(ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape matches data"))
}

/// A 2-entry attribute of positive values (strides, dilations), default 1s.
fn pos2(cx: &Ctx, a: &mut Attrs, key: &str) -> R<[usize; 2]> {
    match a.ints_opt(key)? {
        None => Ok([1, 1]),
        Some(v) if v.len() == 2 && v.iter().all(|x| (1..=MAX_ATTR).contains(x)) => {
            Ok([v[0] as usize, v[1] as usize])
        }
        Some(v) => Err(cx.invalid(format!("`{key}` {v:?} must be two positive values"))),
    }
}

/// Explicit `[top, left, bottom, right]` pads from `pads` or `auto_pad`.
fn spatial_pads(
    cx: &Ctx,
    a: &mut Attrs,
    input: &[usize],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
) -> R<[usize; 4]> {
    let auto = a.string("auto_pad", "NOTSET")?;
    let explicit = a.ints_opt("pads")?;
    match auto.as_str() {
        "NOTSET" => match explicit {
            None => Ok([0; 4]),
            Some(p) if p.len() == 4 && p.iter().all(|x| (0..=MAX_ATTR).contains(x)) => {
                Ok([p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize])
            }
            Some(p) => Err(cx.invalid(format!("pads {p:?} must be four non-negative values"))),
        },
        "VALID" => Ok([0; 4]),
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut pads = [0; 4];
            for i in 0..2 {
                let out = input[i].div_ceil(strides[i]);
                let extent = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out.max(1) - 1) * strides[i] + extent).saturating_sub(input[i]);
                let (small, big) = (total / 2, total - total / 2);
                let (b, e) = if auto == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                };
                pads[i] = b;
                pads[i + 2] = e;
            }
            Ok(pads)
        }
        other => {
            unsup!("auto_pad `{other}` is not supported (NOTSET, SAME_UPPER, SAME_LOWER, VALID)")
        }
    }
}
