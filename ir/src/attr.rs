//! Attribute values and the reader ops use to decode them.
//!
//! Ops describe their attributes as an ordered list of `(name, AttrValue)`
//! and rebuild themselves from an [`AttrReader`]. The text format and the
//! ONNX importer share this one path, so attribute validation lives in one
//! place per op.

use std::collections::BTreeMap;
use std::fmt;

/// A literal attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// Integer (also used for booleans: 0 or 1).
    Int(i64),
    /// Floating point.
    Float(f32),
    /// Bare word, e.g. `reflect`.
    Word(String),
    /// List of integers.
    Ints(Vec<i64>),
    /// List of floats.
    Floats(Vec<f32>),
}

impl fmt::Display for AttrValue {
    /// Canonical text spelling. Floats use Rust's shortest round-trip form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write!(f, "{}", fmt_f32(*v)),
            // Words that would not lex back as a bare identifier (Einsum
            // equations, RNN activation lists, keywords) are quoted.
            AttrValue::Word(w) => {
                let bare = w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !matches!(w.as_str(), "inf" | "nan" | "true" | "false");
                if bare {
                    f.write_str(w)
                } else {
                    f.write_str(&crate::init::quote(w))
                }
            }
            AttrValue::Ints(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            AttrValue::Floats(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}", fmt_f32(*x))?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Formats an f32 so that it reads back bit-exactly and always looks like a
/// float (`1.0`, `1e-5`, `inf`, `-inf`, `nan`).
pub fn fmt_f32(v: f32) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{v:?}")
    }
}

/// An attribute decoding error. `key` names the offending attribute so the
/// caller can point at it (a span in text, a node in ONNX).
#[derive(Clone, Debug, PartialEq)]
pub struct AttrError {
    /// The attribute at fault, if one.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl AttrError {
    /// An error about one attribute.
    pub fn at(key: &str, message: impl Into<String>) -> Self {
        AttrError {
            key: Some(key.to_string()),
            message: message.into(),
        }
    }

    /// An error about the op as a whole.
    pub fn op(message: impl Into<String>) -> Self {
        AttrError {
            key: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for AttrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(k) => write!(f, "attribute `{k}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for AttrError {}

/// Typed access to a bag of attributes. Every read consumes the key, so
/// [`AttrReader::finish`] can reject unknown attributes.
#[derive(Clone, Debug, Default)]
pub struct AttrReader {
    attrs: BTreeMap<String, AttrValue>,
}

impl AttrReader {
    /// Wraps a set of attributes.
    pub fn new(attrs: impl IntoIterator<Item = (String, AttrValue)>) -> Self {
        AttrReader {
            attrs: attrs.into_iter().collect(),
        }
    }

    fn take(&mut self, key: &str) -> Option<AttrValue> {
        self.attrs.remove(key)
    }

    /// An integer attribute, or `default` when absent.
    pub fn int(&mut self, key: &str, default: i64) -> Result<i64, AttrError> {
        match self.take(key) {
            None => Ok(default),
            Some(AttrValue::Int(v)) => Ok(v),
            Some(v) => Err(AttrError::at(
                key,
                format!("expected an integer, found `{v}`"),
            )),
        }
    }

    /// A non-negative integer attribute that must be at least `min`.
    pub fn usize_min(&mut self, key: &str, default: usize, min: usize) -> Result<usize, AttrError> {
        let v = self.int(key, default as i64)?;
        if v < min as i64 {
            return Err(AttrError::at(
                key,
                format!("must be at least {min}, found {v}"),
            ));
        }
        Ok(v as usize)
    }

    /// A boolean stored as 0 or 1.
    pub fn flag(&mut self, key: &str, default: bool) -> Result<bool, AttrError> {
        match self.int(key, default as i64)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(AttrError::at(key, format!("must be 0 or 1, found {v}"))),
        }
    }

    /// A float attribute (integers are accepted and widened).
    pub fn float(&mut self, key: &str, default: f32) -> Result<f32, AttrError> {
        match self.take(key) {
            None => Ok(default),
            Some(AttrValue::Float(v)) => Ok(v),
            Some(AttrValue::Int(v)) => Ok(v as f32),
            Some(v) => Err(AttrError::at(
                key,
                format!("expected a number, found `{v}`"),
            )),
        }
    }

    /// A list of integers, or `None` when absent.
    pub fn ints_opt(&mut self, key: &str) -> Result<Option<Vec<i64>>, AttrError> {
        match self.take(key) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v)),
            Some(AttrValue::Int(v)) => Ok(Some(vec![v])),
            Some(v) => Err(AttrError::at(
                key,
                format!("expected a list of integers, found `{v}`"),
            )),
        }
    }

    /// A list of integers, or `default` when absent.
    pub fn ints(&mut self, key: &str, default: &[i64]) -> Result<Vec<i64>, AttrError> {
        Ok(self.ints_opt(key)?.unwrap_or_else(|| default.to_vec()))
    }

    /// A required list of integers.
    pub fn ints_required(&mut self, key: &str) -> Result<Vec<i64>, AttrError> {
        self.ints_opt(key)?
            .ok_or_else(|| AttrError::at(key, "is required"))
    }

    /// A list of exactly `n` integers each at least `min`, or `default`.
    pub fn usizes_n(
        &mut self,
        key: &str,
        n: usize,
        default: usize,
        min: usize,
    ) -> Result<Vec<usize>, AttrError> {
        let v = self.ints(key, &vec![default as i64; n])?;
        if v.len() != n {
            return Err(AttrError::at(
                key,
                format!("expected {n} values, found {}", v.len()),
            ));
        }
        v.iter()
            .map(|&x| {
                if x < min as i64 {
                    Err(AttrError::at(
                        key,
                        format!("values must be at least {min}, found {x}"),
                    ))
                } else {
                    Ok(x as usize)
                }
            })
            .collect()
    }

    /// A bare word from a fixed set, or `default` when absent.
    pub fn word(
        &mut self,
        key: &str,
        default: &str,
        allowed: &[&str],
    ) -> Result<String, AttrError> {
        let w = match self.take(key) {
            None => default.to_string(),
            Some(AttrValue::Word(w)) => w,
            Some(v) => return Err(AttrError::at(key, format!("expected a word, found `{v}`"))),
        };
        if allowed.contains(&w.as_str()) {
            Ok(w)
        } else {
            Err(AttrError::at(
                key,
                format!("`{w}` is not one of {}", allowed.join(", ")),
            ))
        }
    }

    /// A word (bare or quoted) of any spelling, or `None` when absent; the
    /// caller validates it.
    pub fn word_any(&mut self, key: &str) -> Result<Option<String>, AttrError> {
        match self.take(key) {
            None => Ok(None),
            Some(AttrValue::Word(w)) => Ok(Some(w)),
            Some(v) => Err(AttrError::at(key, format!("expected a word, found `{v}`"))),
        }
    }

    /// A list of floats (integers are widened), or `default` when absent.
    pub fn floats(&mut self, key: &str, default: &[f32]) -> Result<Vec<f32>, AttrError> {
        match self.take(key) {
            None => Ok(default.to_vec()),
            Some(AttrValue::Floats(v)) => Ok(v),
            Some(AttrValue::Ints(v)) => Ok(v.into_iter().map(|x| x as f32).collect()),
            Some(AttrValue::Float(v)) => Ok(vec![v]),
            Some(AttrValue::Int(v)) => Ok(vec![v as f32]),
            Some(v) => Err(AttrError::at(
                key,
                format!("expected a list of numbers, found `{v}`"),
            )),
        }
    }

    /// Rejects any attribute that no read consumed.
    pub fn finish(self, op: &str) -> Result<(), AttrError> {
        match self.attrs.into_keys().next() {
            None => Ok(()),
            Some(k) => Err(AttrError::at(&k, format!("is not an attribute of {op}"))),
        }
    }
}
