//! The e-graph's language: every IR op as an e-node operator (its
//! attributes part of the node), graph sources as leaves, and a projection
//! for the results of multi-result ops.

use dnnc_ir::{AttrReader, Op};
use egg::{FromOp, Id, Language};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// An IR op as an e-node operator. Two keys are the same operator when
/// their canonical text (name and every attribute, as `dnnc ir` prints
/// them) is the same. Rule patterns name ops without attributes and match
/// every op of that name (`op` is then `None`); the rules that rewrite
/// attributed ops read them from the matched e-nodes.
#[derive(Clone, Debug)]
pub struct OpKey {
    name: &'static str,
    text: String,
    op: Option<Arc<Op>>,
}

impl OpKey {
    /// The key of `op`.
    pub fn new(op: Op) -> Self {
        let attrs = op.attrs();
        let text = if attrs.is_empty() {
            op.name().to_string()
        } else {
            let a: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{}{{{}}}", op.name(), a.join(", "))
        };
        OpKey {
            name: op.name(),
            text,
            op: Some(Arc::new(op)),
        }
    }

    /// The op's name (`Conv2d`, `Relu`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The op, or `None` for a pattern's attribute-free placeholder.
    pub fn op(&self) -> Option<&Op> {
        self.op.as_deref()
    }
}

impl PartialEq for OpKey {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}
impl Eq for OpKey {}
impl Hash for OpKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.text.hash(h)
    }
}
impl PartialOrd for OpKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OpKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.text.cmp(&other.text)
    }
}

/// One e-node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TensorNode {
    /// A graph input, parameter or constant, by value name.
    Source(String),
    /// An op applied to its operands' e-classes.
    Op(OpKey, Vec<Id>),
    /// Result `i` of a multi-result op's e-class.
    Get(usize, [Id; 1]),
}

impl TensorNode {
    /// The op node `op(args)`.
    pub fn op(op: Op, args: Vec<Id>) -> Self {
        TensorNode::Op(OpKey::new(op), args)
    }

    /// The IR op of an op node (`None` for sources, projections and
    /// pattern placeholders).
    pub fn ir_op(&self) -> Option<&Op> {
        match self {
            TensorNode::Op(k, _) => k.op(),
            _ => None,
        }
    }

    /// The op name of an op node.
    pub fn op_name(&self) -> Option<&'static str> {
        match self {
            TensorNode::Op(k, _) => Some(k.name()),
            _ => None,
        }
    }
}

/// What e-matching compares: the op name and arity, not the attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Discriminant {
    /// A source, by value name.
    Source(String),
    /// An op, by name.
    Op(&'static str),
    /// A projection, by result index.
    Get(usize),
}

impl Language for TensorNode {
    type Discriminant = Discriminant;

    fn discriminant(&self) -> Discriminant {
        match self {
            TensorNode::Source(n) => Discriminant::Source(n.clone()),
            TensorNode::Op(k, _) => Discriminant::Op(k.name),
            TensorNode::Get(i, _) => Discriminant::Get(*i),
        }
    }

    fn matches(&self, other: &Self) -> bool {
        self.discriminant() == other.discriminant()
            && self.children().len() == other.children().len()
    }

    fn children(&self) -> &[Id] {
        match self {
            TensorNode::Source(_) => &[],
            TensorNode::Op(_, a) => a,
            TensorNode::Get(_, t) => t,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            TensorNode::Source(_) => &mut [],
            TensorNode::Op(_, a) => a,
            TensorNode::Get(_, t) => t,
        }
    }
}

impl fmt::Display for TensorNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorNode::Source(n) => write!(f, "%{n}"),
            TensorNode::Op(k, _) => f.write_str(&k.text),
            TensorNode::Get(i, _) => write!(f, "get{i}"),
        }
    }
}

/// Why a rule pattern's operator did not parse.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not an op name, a `%source` or `getN`")]
pub struct UnknownOperator(String);

impl FromOp for TensorNode {
    type Error = UnknownOperator;

    /// `%name` is a source, `getN` a projection, any other word an op
    /// name: the op with default attributes when it has them all, else an
    /// attribute-free placeholder that only patterns use.
    fn from_op(op: &str, children: Vec<Id>) -> Result<Self, Self::Error> {
        if let Some(name) = op.strip_prefix('%') {
            return Ok(TensorNode::Source(name.to_string()));
        }
        if let Some(i) = op.strip_prefix("get").and_then(|i| i.parse().ok()) {
            if let [t] = children[..] {
                return Ok(TensorNode::Get(i, [t]));
            }
        }
        let name = dnnc_ir::op::OP_NAMES
            .iter()
            .copied()
            .find(|&n| n == op)
            .ok_or_else(|| UnknownOperator(op.to_string()))?;
        let key = match Op::from_attrs(name, AttrReader::new([])) {
            Ok(Some(o)) => OpKey::new(o),
            _ => OpKey {
                name,
                text: name.to_string(),
                op: None,
            },
        };
        Ok(TensorNode::Op(key, children))
    }
}
