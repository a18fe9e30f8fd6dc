//! Recursive-descent parser and name resolution.
//!
//! Parsing runs in two phases so forward references work: first every
//! statement is read and checked on its own (syntax, op name, attributes,
//! initializer, literal, duplicate names) in source order; then names are
//! resolved, statements ordered topologically (source order wherever
//! dependencies allow) and added to a [`Graph`], which infers every type.

use super::error::{line_col, Diag, ParseError};
use super::lexer::{Lexer, Span, Tok, Token};
use super::printer::value_name;
use crate::attr::{AttrError, AttrReader, AttrValue};
use crate::graph::{Graph, GraphError};
use crate::init::Init;
use crate::op::{Op, OP_NAMES};
use crate::tensor::Tensor;
use crate::types::{DType, TensorType};
use ndarray::{ArrayD, IxDyn};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Parses a model in the text format. `file_name` appears in error messages
/// and rendered diagnostics.
pub fn parse(src: &str, file_name: &str) -> Result<Graph, ParseError> {
    parse_diag(src).map_err(|d| d.into_error(src, file_name))
}

fn parse_diag(src: &str) -> Result<Graph, Diag> {
    let mut p = Parser {
        lex: Lexer::new(src),
        peeked: None,
        src,
        defs: HashMap::new(),
        stmts: vec![],
        uses: vec![],
        outputs: vec![],
        saw_output: false,
    };
    let header = p.model()?;
    p.resolve(header)
}

/// A name and where it is written.
#[derive(Clone, Debug)]
struct Name {
    text: String,
    span: Span,
}

/// One `key=value` attribute as written, with the span of the whole pair.
type AttrAst = (String, AttrValue, Span);

/// A written type and where.
#[derive(Clone, Debug)]
struct TypeAst {
    ty: TensorType,
    span: Span,
}

#[derive(Debug)]
enum Kind {
    Input(TypeAst),
    Param(TypeAst, Init),
    Const(Tensor),
    Node {
        op: Op,
        args: Vec<Name>,
        types: Vec<Option<TypeAst>>,
    },
}

#[derive(Debug)]
struct Stmt {
    results: Vec<Name>,
    kind: Kind,
    span: Span,
}

/// A use of a value name: a node operand or a graph output.
struct UseSite {
    name: Name,
    is_output: bool,
}

/// The graph header, kept for messages about the graph as a whole.
struct Header {
    name: String,
    name_span: Span,
    close: Span,
}

struct Parser<'a> {
    lex: Lexer<'a>,
    peeked: Option<Token>,
    src: &'a str,
    /// Value name -> (defining statement, span of the definition).
    defs: HashMap<String, (usize, Span)>,
    stmts: Vec<Stmt>,
    uses: Vec<UseSite>,
    outputs: Vec<Name>,
    saw_output: bool,
}

/// Largest element count a type may have; bounds every product of
/// dimensions so shape arithmetic cannot overflow.
const MAX_ELEMENTS: u128 = i64::MAX as u128;

/// Whether every product of `shape`'s dimensions stays within
/// [`MAX_ELEMENTS`] (zeros count as one, so sub-products are bounded too).
fn type_fits(shape: &[usize]) -> bool {
    let mut n: u128 = 1;
    for &d in shape {
        n = n.saturating_mul(d.max(1) as u128);
        if n > MAX_ELEMENTS {
            return false;
        }
    }
    true
}

fn short(text: &str) -> String {
    if text.chars().count() > 24 {
        format!("{}…", text.chars().take(24).collect::<String>())
    } else {
        text.to_string()
    }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// Edit distance over lowercased characters, counting a swap of adjacent
/// characters as one edit (optimal string alignment), so `alpah` is one
/// edit from `alpha`.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * w + j] = if i == 0 || j == 0 {
                i + j
            } else {
                let sub = d[(i - 1) * w + j - 1] + usize::from(a[i - 1] != b[j - 1]);
                let mut v = sub.min(d[(i - 1) * w + j] + 1).min(d[i * w + j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    v = v.min(d[(i - 2) * w + j - 2] + 1);
                }
                v
            };
        }
    }
    d[a.len() * w + b.len()]
}

/// Up to three candidates close to `word`, closest first.
fn suggest<'c>(word: &str, cands: impl Iterator<Item = &'c str>) -> Vec<&'c str> {
    if word.chars().count() > 64 {
        return vec![];
    }
    let lw = word.to_lowercase();
    let mut scored: Vec<(usize, &str)> = cands
        .filter(|c| c.chars().count() <= 64)
        .filter_map(|c| {
            let d = distance(word, c);
            let lc = c.to_lowercase();
            let prefix =
                lw.len() >= 3 && lc.len() >= 3 && (lc.starts_with(&lw) || lw.starts_with(&lc));
            (d <= (word.chars().count() / 3).max(1) || prefix).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.dedup();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

fn did_you_mean(cands: &[&str], fmt: impl Fn(&str) -> String) -> Option<String> {
    match cands {
        [] => None,
        [one] => Some(format!("did you mean {}?", fmt(one))),
        many => Some(format!(
            "did you mean one of {}?",
            many.iter().map(|c| fmt(c)).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Reads a token as an f32: numbers (integers widen) and `inf` / `nan`.
fn float_of(t: &Token) -> Option<Result<f32, Diag>> {
    match &t.tok {
        Tok::Ident(s) if s == "inf" => Some(Ok(f32::INFINITY)),
        Tok::Ident(s) if s == "nan" => Some(Ok(f32::NAN)),
        Tok::Number { text, .. } => Some(match text.as_str() {
            "-inf" => Ok(f32::NEG_INFINITY),
            "-nan" => Ok(f32::NAN),
            s => match s.parse::<f32>() {
                Ok(v) if v.is_finite() => Ok(v),
                _ => Err(Diag::new(
                    t.span.clone(),
                    format!("number `{}` is out of range for f32", short(s)),
                )
                .label("too large for f32")
                .help("write `inf` or `-inf` for infinities")),
            },
        }),
        _ => None,
    }
}

/// Reads an integer token as i128 (wide enough for u64 seeds and i64).
fn int_of(t: &Token) -> Option<Result<i128, Diag>> {
    match &t.tok {
        Tok::Number { text, float: false } => Some(text.parse::<i128>().map_err(|_| {
            Diag::new(
                t.span.clone(),
                format!("integer `{}` is too large", short(text)),
            )
            .label("does not fit in 64 bits")
        })),
        _ => None,
    }
}

fn i64_of(t: &Token) -> Option<Result<i64, Diag>> {
    int_of(t).map(|r| {
        r.and_then(|v| {
            i64::try_from(v).map_err(|_| {
                Diag::new(
                    t.span.clone(),
                    format!("integer `{v}` does not fit in 64 bits"),
                )
                .label("out of range for i64")
            })
        })
    })
}

const INIT_NAMES: &[&str] = &[
    "zeros", "ones", "constant", "uniform", "normal", "xavier", "he", "external",
];

impl<'a> Parser<'a> {
    // ----- token plumbing -------------------------------------------------

    fn peek(&mut self) -> Result<&Token, Diag> {
        if self.peeked.is_none() {
            self.peeked = Some(self.lex.next_token()?);
        }
        Ok(self.peeked.as_ref().expect("just filled"))
    }

    fn bump(&mut self) -> Result<Token, Diag> {
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lex.next_token(),
        }
    }

    fn peek_is(&mut self, c: char) -> Result<bool, Diag> {
        Ok(self.peek()?.tok == Tok::Punct(c))
    }

    /// "expected X, found Y" at `t`, or "unexpected end of file" at the end.
    fn unexpected(&self, t: &Token, expected: &str) -> Diag {
        if t.tok == Tok::Eof {
            let end = self.eof();
            Diag::new(
                end..end,
                format!("unexpected end of file: expected {expected}"),
            )
            .label(format!("expected {expected}"))
        } else {
            Diag::new(
                t.span.clone(),
                format!("expected {expected}, found {}", t.tok.describe()),
            )
            .label(format!("expected {expected}"))
        }
    }

    fn expect(&mut self, c: char, expected: &str) -> Result<Span, Diag> {
        let t = self.bump()?;
        if t.tok == Tok::Punct(c) {
            Ok(t.span)
        } else {
            Err(self.unexpected(&t, expected))
        }
    }

    /// Where "unexpected end of file" points: just past the last text, so
    /// the report shows the line where the file stops.
    fn eof(&self) -> usize {
        self.src.trim_end().len()
    }

    fn line_of(&self, offset: usize) -> usize {
        line_col(self.src, offset).0
    }

    // ----- model and statements -------------------------------------------

    fn model(&mut self) -> Result<Header, Diag> {
        let t = self.bump()?;
        if t.tok != Tok::Ident("graph".into()) {
            return Err(self
                .unexpected(&t, "`graph`")
                .help("a model starts with `graph NAME {`"));
        }
        let t = self.bump()?;
        let name =
            match t.tok {
                Tok::Ident(s) | Tok::Str(s) => s,
                _ => return Err(self.unexpected(&t, "a graph name").help(
                    "write the name as an identifier or a quoted string, e.g. `graph \"my-net\" {`",
                )),
            };
        let name_span = t.span;
        let open = self.expect('{', "`{`")?;
        loop {
            let t = self.peek()?.clone();
            match &t.tok {
                Tok::Punct('}') => {
                    self.bump()?;
                    let after = self.bump()?;
                    if after.tok != Tok::Eof {
                        return Err(Diag::new(
                            after.span,
                            format!(
                                "unexpected {} after the closing `}}` of graph `{name}`",
                                after.tok.describe()
                            ),
                        )
                        .label("text after the end of the graph")
                        .related(t.span.clone(), "graph ends here")
                        .help("a file holds exactly one graph"));
                    }
                    return Ok(Header {
                        name,
                        name_span,
                        close: t.span,
                    });
                }
                Tok::Eof => {
                    let end = self.eof();
                    return Err(Diag::new(
                        end..end,
                        format!("unexpected end of file: expected `}}` to close graph `{name}`"),
                    )
                    .label("file ends here")
                    .related(open, format!("graph `{name}` opened here")));
                }
                Tok::Ident(k) if k == "input" => self.input()?,
                Tok::Ident(k) if k == "param" => self.param()?,
                Tok::Ident(k) if k == "const" => self.constant()?,
                Tok::Ident(k) if k == "output" => self.output()?,
                Tok::Value(_) => self.node()?,
                Tok::Ident(k) => {
                    let mut d = self.unexpected(&t, "a statement");
                    d = if Op::is_known(k) {
                        d.help(format!(
                            "a node names its result first, e.g. `%y = {k}(%x)`"
                        ))
                    } else {
                        let cands = suggest(k, ["input", "param", "const", "output"].into_iter());
                        d.help_opt(did_you_mean(&cands, |c| format!("`{c}`")).or_else(|| {
                            Some(
                                "statements are `input`, `param`, `const`, `output`, or `%result = Op(%args)`"
                                    .into(),
                            )
                        }))
                    };
                    return Err(d);
                }
                _ => return Err(self.unexpected(&t, "a statement").help(
                    "statements are `input`, `param`, `const`, `output`, or `%result = Op(%args)`",
                )),
            }
        }
    }

    /// A defining occurrence of a value name; rejects a name already defined.
    fn def_name(&mut self, what: &str) -> Result<Name, Diag> {
        let t = self.bump()?;
        let Tok::Value(text) = t.tok.clone() else {
            return Err(self.unexpected(&t, what));
        };
        if let Some((_, first)) = self.defs.get(&text) {
            let line = self.line_of(first.start);
            return Err(Diag::new(
                t.span.clone(),
                format!(
                    "value `%{}` is already defined (first on line {line})",
                    value_name(&text)
                ),
            )
            .label("defined again here")
            .related(first.clone(), "first defined here")
            .help("every value name must be unique within the graph"));
        }
        self.defs
            .insert(text.clone(), (self.stmts.len(), t.span.clone()));
        Ok(Name { text, span: t.span })
    }

    fn use_name(&mut self, t: Token, is_output: bool) -> Name {
        let text = match t.tok {
            Tok::Value(s) => s,
            _ => String::new(),
        };
        let name = Name { text, span: t.span };
        self.uses.push(UseSite {
            name: name.clone(),
            is_output,
        });
        name
    }

    fn input(&mut self) -> Result<(), Diag> {
        let kw = self.bump()?;
        let name = self.def_name("a value name like `%x` after `input`")?;
        self.expect(':', "`:` and the input's type")?;
        let ty = self.ty()?;
        let span = kw.span.start..ty.span.end;
        self.stmts.push(Stmt {
            results: vec![name],
            kind: Kind::Input(ty),
            span,
        });
        Ok(())
    }

    fn param(&mut self) -> Result<(), Diag> {
        let kw = self.bump()?;
        let name = self.def_name("a value name like `%w` after `param`")?;
        self.expect(':', "`:` and the parameter's type")?;
        let ty = self.ty()?;
        if ty.ty.dtype != DType::F32 {
            let dspan = ty.span.start..ty.span.start + ty.ty.dtype.name().len();
            return Err(Diag::new(
                dspan,
                format!("parameters must be f32, found {}", ty.ty.dtype),
            )
            .label("not f32")
            .help("use `const` for i64 or bool data"));
        }
        let mut end = ty.span.end;
        let init = if self.peek_is('=')? {
            self.bump()?;
            let (init, span) = self.init()?;
            end = span.end;
            init
        } else {
            Init::External(name.text.clone())
        };
        self.stmts.push(Stmt {
            results: vec![name],
            kind: Kind::Param(ty, init),
            span: kw.span.start..end,
        });
        Ok(())
    }

    fn constant(&mut self) -> Result<(), Diag> {
        let kw = self.bump()?;
        let name = self.def_name("a value name like `%c` after `const`")?;
        self.expect(':', "`:` and the constant's type")?;
        let ty = self.ty()?;
        self.expect('=', "`=` and the constant's data, e.g. `= [1, 2]`")?;
        let (data, lit_span) = self.literal(&ty, &name)?;
        self.stmts.push(Stmt {
            results: vec![name],
            kind: Kind::Const(data),
            span: kw.span.start..lit_span.end,
        });
        Ok(())
    }

    fn output(&mut self) -> Result<(), Diag> {
        self.bump()?;
        self.saw_output = true;
        loop {
            let t = self.bump()?;
            if !matches!(t.tok, Tok::Value(_)) {
                return Err(self.unexpected(&t, "a value like `%y` to output"));
            }
            let n = self.use_name(t, true);
            self.outputs.push(n);
            if !self.peek_is(',')? {
                return Ok(());
            }
            self.bump()?;
        }
    }

    fn node(&mut self) -> Result<(), Diag> {
        let start = self.peek()?.span.start;
        let mut results = vec![];
        let mut types = vec![];
        loop {
            let name = self.def_name("a result name like `%y`")?;
            results.push(name);
            let typed = self.peek_is(':')?;
            if typed {
                self.bump()?;
                types.push(Some(self.ty()?));
            } else {
                types.push(None);
            }
            let t = self.bump()?;
            match t.tok {
                Tok::Punct(',') => continue,
                Tok::Punct('=') => break,
                _ => {
                    let exp = if typed {
                        "`,` or `=`"
                    } else {
                        "`:`, `,` or `=`"
                    };
                    return Err(self.unexpected(&t, exp));
                }
            }
        }
        let t = self.bump()?;
        let op_name = match &t.tok {
            Tok::Ident(s) => s.clone(),
            Tok::Value(v) => {
                return Err(self.unexpected(&t, "an op name").help(format!(
                    "to copy a value write `Identity(%{})`",
                    value_name(v)
                )))
            }
            _ => return Err(self.unexpected(&t, "an op name like `Relu`")),
        };
        let op_span = t.span;
        let open = self.expect('(', &format!("`(` after `{op_name}`"))?;
        let mut args = vec![];
        let close = if self.peek_is(')')? {
            self.bump()?.span
        } else {
            loop {
                let t = self.bump()?;
                if !matches!(t.tok, Tok::Value(_)) {
                    return Err(self.unexpected(&t, "an operand like `%x`"));
                }
                args.push(self.use_name(t, false));
                let t = self.bump()?;
                match t.tok {
                    Tok::Punct(',') => {}
                    Tok::Punct(')') => break t.span,
                    _ => return Err(self.unexpected(&t, "`,` or `)`")),
                }
            }
        };
        let mut end = close.end;
        let mut attrs: Vec<AttrAst> = vec![];
        if self.peek_is('{')? {
            let (a, span) = self.attrs()?;
            attrs = a;
            end = span.end;
        }
        let span = start..end;
        let op = self.build_op(&op_name, &op_span, &attrs, &span)?;
        let (lo, hi) = op.arity();
        if args.len() < lo || args.len() > hi {
            let takes = if lo == hi {
                plural(lo, "input")
            } else if hi == usize::MAX {
                format!("at least {}", plural(lo, "input"))
            } else {
                format!("{lo} to {hi} inputs")
            };
            return Err(Diag::new(
                open.start..close.end,
                format!("{op_name} takes {takes}, found {}", args.len()),
            )
            .label(format!("{} given", plural(args.len(), "input"))));
        }
        if results.len() != op.num_outputs() {
            let rspan = results[0].span.start..results[results.len() - 1].span.end;
            let n = op.num_outputs();
            let mut d = Diag::new(
                rspan,
                format!(
                    "{op_name} produces {}, but {} given",
                    plural(n, "result"),
                    if results.len() == 1 {
                        "1 name is".to_string()
                    } else {
                        format!("{} names are", results.len())
                    }
                ),
            )
            .label(format!("{} here", plural(results.len(), "name")));
            if op_name == "Split" {
                d = d.help("Split produces one result per entry of its `split` attribute");
            }
            return Err(d);
        }
        self.stmts.push(Stmt {
            results,
            kind: Kind::Node { op, args, types },
            span,
        });
        Ok(())
    }

    /// `{ key=value, ... }`.
    fn attrs(&mut self) -> Result<(Vec<AttrAst>, Span), Diag> {
        let open = self.bump()?.span;
        let mut out: Vec<AttrAst> = vec![];
        if self.peek_is('}')? {
            let close = self.bump()?.span;
            return Ok((out, open.start..close.end));
        }
        loop {
            let t = self.bump()?;
            let Tok::Ident(key) = t.tok.clone() else {
                return Err(self.unexpected(&t, "an attribute name"));
            };
            if let Some((_, _, first)) = out.iter().find(|(k, _, _)| *k == key) {
                return Err(
                    Diag::new(t.span.clone(), format!("attribute `{key}` is given twice"))
                        .label("given again here")
                        .related(first.clone(), "first given here"),
                );
            }
            self.expect('=', &format!("`=` after attribute `{key}`"))?;
            let (value, vspan) = self.attr_value()?;
            out.push((key, value, t.span.start..vspan.end));
            let t = self.bump()?;
            match t.tok {
                Tok::Punct(',') => {}
                Tok::Punct('}') => return Ok((out, open.start..t.span.end)),
                _ => return Err(self.unexpected(&t, "`,` or `}`")),
            }
        }
    }

    fn attr_value(&mut self) -> Result<(AttrValue, Span), Diag> {
        let t = self.bump()?;
        let expected = "an attribute value (number, word or list)";
        match &t.tok {
            Tok::Number { float: false, .. } => {
                Ok((AttrValue::Int(i64_of(&t).expect("int")?), t.span))
            }
            Tok::Number { .. } => Ok((AttrValue::Float(float_of(&t).expect("num")?), t.span)),
            Tok::Ident(w) => Ok((
                match w.as_str() {
                    "inf" => AttrValue::Float(f32::INFINITY),
                    "nan" => AttrValue::Float(f32::NAN),
                    "true" => AttrValue::Int(1),
                    "false" => AttrValue::Int(0),
                    _ => AttrValue::Word(w.clone()),
                },
                t.span,
            )),
            Tok::Punct('[') => {
                let start = t.span.start;
                let mut ints: Vec<i64> = vec![];
                let mut floats: Vec<f32> = vec![];
                let mut any_float = false;
                if self.peek_is(']')? {
                    let end = self.bump()?.span.end;
                    return Ok((AttrValue::Ints(vec![]), start..end));
                }
                loop {
                    let e = self.bump()?;
                    let is_int = matches!(e.tok, Tok::Number { float: false, .. });
                    if is_int && !any_float {
                        let v = i64_of(&e).expect("int")?;
                        ints.push(v);
                        floats.push(v as f32);
                    } else if let Some(f) = float_of(&e) {
                        if !any_float {
                            any_float = true;
                        }
                        floats.push(f?);
                    } else {
                        return Err(self.unexpected(&e, "a number"));
                    }
                    let t = self.bump()?;
                    match t.tok {
                        Tok::Punct(',') => {}
                        Tok::Punct(']') => {
                            let v = if any_float {
                                AttrValue::Floats(floats)
                            } else {
                                AttrValue::Ints(ints)
                            };
                            return Ok((v, start..t.span.end));
                        }
                        _ => return Err(self.unexpected(&t, "`,` or `]`")),
                    }
                }
            }
            // Quoted words carry text that is not an identifier (Einsum
            // equations, activation lists).
            Tok::Str(w) => Ok((AttrValue::Word(w.clone()), t.span)),
            _ => Err(self.unexpected(&t, expected)),
        }
    }

    /// Builds the op, mapping attribute errors to the attribute's span.
    fn build_op(
        &self,
        name: &str,
        op_span: &Span,
        attrs: &[AttrAst],
        stmt: &Span,
    ) -> Result<Op, Diag> {
        let reader = AttrReader::new(attrs.iter().map(|(k, v, _)| (k.clone(), v.clone())));
        let built = catch_unwind(AssertUnwindSafe(|| Op::from_attrs(name, reader)));
        let built = built.map_err(|_| {
            Diag::new(
                stmt.clone(),
                format!("{name}: attribute values are too large"),
            )
            .label("arithmetic overflow while checking these attributes")
        })?;
        match built {
            Ok(Some(op)) => Ok(op),
            Ok(None) => {
                let cands = suggest(name, OP_NAMES.iter().copied());
                Err(Diag::new(op_span.clone(), format!("unknown op `{name}`"))
                    .label("not an op of the IR")
                    .help(
                        did_you_mean(&cands, |c| format!("`{c}`")).unwrap_or_else(|| {
                            "see the op reference in docs/ir.md for the ops dnnc knows".into()
                        }),
                    ))
            }
            Err(AttrError { key, message }) => {
                let at = key
                    .as_ref()
                    .and_then(|k| attrs.iter().find(|(a, _, _)| a == k))
                    .map(|(_, _, s)| s.clone());
                Err(match key {
                    Some(k) if message.starts_with("is not an attribute") => {
                        let valid = self.attr_names(name, attrs, &k);
                        Diag::new(
                            at.unwrap_or_else(|| op_span.clone()),
                            format!("unknown attribute `{k}` for {name}"),
                        )
                        .label("not an attribute of this op")
                        .help_opt(valid)
                    }
                    Some(k) => {
                        let sep = if message.starts_with("is ") {
                            " "
                        } else {
                            ": "
                        };
                        let d = Diag::new(
                            at.clone().unwrap_or_else(|| op_span.clone()),
                            format!("{name} attribute `{k}`{sep}{message}"),
                        );
                        if at.is_some() {
                            d.label("invalid attribute")
                        } else {
                            d.label(format!("needs attribute `{k}`"))
                        }
                    }
                    None => Diag::new(stmt.clone(), format!("{name}: {message}"))
                        .label("invalid attributes"),
                })
            }
        }
    }

    /// "valid attributes are ..." for an op, found by building it without
    /// the unknown attribute.
    fn attr_names(&self, name: &str, attrs: &[AttrAst], bad: &str) -> Option<String> {
        let rest = attrs
            .iter()
            .filter(|(k, _, _)| k != bad)
            .map(|(k, v, _)| (k.clone(), v.clone()));
        let op = catch_unwind(AssertUnwindSafe(|| {
            Op::from_attrs(name, AttrReader::new(rest))
        }))
        .ok()?
        .ok()??;
        let names: Vec<&str> = op.attrs().iter().map(|(k, _)| *k).collect();
        Some(if names.is_empty() {
            format!("{name} takes no attributes")
        } else {
            let list: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
            match did_you_mean(&suggest(bad, names.iter().copied()), |c| format!("`{c}`")) {
                Some(dym) => format!("{dym} {name}'s attributes are {}", list.join(", ")),
                None => format!("{name}'s attributes are {}", list.join(", ")),
            }
        })
    }

    // ----- types, initializers, literals ----------------------------------

    fn ty(&mut self) -> Result<TypeAst, Diag> {
        let t = self.bump()?;
        let dtype = match &t.tok {
            Tok::Ident(d) => DType::from_name(d).ok_or_else(|| {
                Diag::new(t.span.clone(), format!("unknown dtype `{d}`"))
                    .label("not a dtype")
                    .help("the dtypes are f32, i64 and bool")
            })?,
            _ => return Err(self.unexpected(&t, "a type like `f32[1,3,224,224]`")),
        };
        self.expect(
            '[',
            "`[` and the shape, e.g. `f32[1,3,224,224]` (`f32[]` is a scalar)",
        )?;
        let mut shape = vec![];
        let end;
        if self.peek_is(']')? {
            end = self.bump()?.span.end;
        } else {
            loop {
                let d = self.bump()?;
                let v = match int_of(&d) {
                    Some(v) => v?,
                    None => return Err(self.unexpected(&d, "a dimension (a non-negative integer)")),
                };
                let dim = usize::try_from(v).map_err(|_| {
                    if v < 0 {
                        Diag::new(d.span.clone(), format!("dimension {v} is negative"))
                            .label("dimensions are non-negative")
                    } else {
                        Diag::new(d.span.clone(), format!("dimension {v} is too large"))
                            .label("too large")
                    }
                })?;
                shape.push(dim);
                let c = self.bump()?;
                match c.tok {
                    Tok::Punct(',') => {}
                    Tok::Punct(']') => {
                        end = c.span.end;
                        break;
                    }
                    _ => return Err(self.unexpected(&c, "`,` or `]`")),
                }
            }
        }
        let span = t.span.start..end;
        if !type_fits(&shape) {
            return Err(Diag::new(span, "tensor type has too many elements")
                .label("more than 2^63 elements"));
        }
        Ok(TypeAst {
            ty: TensorType::new(dtype, shape),
            span,
        })
    }

    /// `name [ '(' args ')' ]`, checked against the initializer's signature.
    fn init(&mut self) -> Result<(Init, Span), Diag> {
        let t = self.bump()?;
        let Tok::Ident(kind) = t.tok.clone() else {
            return Err(self
                .unexpected(&t, "an initializer like `he(seed=1)`")
                .help(format!("initializers: {}", INIT_NAMES.join(", "))));
        };
        let name_span = t.span.clone();
        if !INIT_NAMES.contains(&kind.as_str()) {
            let cands = suggest(&kind, INIT_NAMES.iter().copied());
            return Err(
                Diag::new(name_span, format!("unknown initializer `{kind}`"))
                    .label("not an initializer")
                    .help(
                        did_you_mean(&cands, |c| format!("`{c}`")).unwrap_or_else(|| {
                            format!("initializers are {}", INIT_NAMES.join(", "))
                        }),
                    ),
            );
        }
        // Arguments: `key=value` pairs, or one string for `external`.
        let mut kw: Vec<(String, Span, Token)> = vec![];
        let mut pos: Vec<(String, Span)> = vec![];
        let mut end = name_span.end;
        if self.peek_is('(')? {
            self.bump()?;
            if self.peek_is(')')? {
                end = self.bump()?.span.end;
            } else {
                loop {
                    let a = self.bump()?;
                    match a.tok.clone() {
                        Tok::Str(s) => pos.push((s, a.span)),
                        Tok::Ident(k) => {
                            if kw.iter().any(|(x, _, _)| *x == k) {
                                return Err(Diag::new(
                                    a.span,
                                    format!("argument `{k}` is given twice"),
                                )
                                .label("given again here"));
                            }
                            self.expect('=', &format!("`=` after argument `{k}`"))?;
                            let v = self.bump()?;
                            if float_of(&v).is_none() {
                                return Err(self.unexpected(&v, &format!("a number for `{k}`")));
                            }
                            kw.push((k, a.span.start..v.span.end, v));
                        }
                        _ => return Err(self.unexpected(&a, "an argument like `seed=1`")),
                    }
                    let c = self.bump()?;
                    match c.tok {
                        Tok::Punct(',') => {}
                        Tok::Punct(')') => {
                            end = c.span.end;
                            break;
                        }
                        _ => return Err(self.unexpected(&c, "`,` or `)`")),
                    }
                }
            }
        }
        let span = name_span.start..end;
        let (keys, example): (&[&str], &str) = match kind.as_str() {
            "constant" => (&["value"], "constant(value=0.1)"),
            "uniform" => (
                &["low", "high", "seed"],
                "uniform(low=-0.1, high=0.1, seed=1)",
            ),
            "normal" => (
                &["mean", "std", "seed"],
                "normal(mean=0.0, std=0.02, seed=1)",
            ),
            "xavier" => (&["seed"], "xavier(seed=1)"),
            "he" => (&["seed"], "he(seed=1)"),
            "external" => (&[], "external(\"fc.weight\")"),
            _ => (&[], ""),
        };
        if kind == "external" {
            if let Some((k, s, _)) = kw.first() {
                return Err(Diag::new(
                    s.clone(),
                    format!("unknown argument `{k}` for initializer `external`"),
                )
                .label("not an argument of `external`")
                .help(format!("write the tensor name as a string: {example}")));
            }
            return match pos.as_slice() {
                [(name, _)] => Ok((Init::External(name.clone()), span)),
                [] => Err(
                    Diag::new(span, "initializer `external` needs the tensor name")
                        .label("tensor name missing")
                        .help(format!("e.g. {example}")),
                ),
                [_, (_, s), ..] => Err(Diag::new(
                    s.clone(),
                    "initializer `external` takes one tensor name",
                )
                .label("extra argument")),
            };
        }
        if let Some((_, s)) = pos.first() {
            return Err(Diag::new(
                s.clone(),
                format!("initializer `{kind}` takes no string arguments"),
            )
            .label("unexpected string")
            .help(if keys.is_empty() {
                format!("`{kind}` takes no arguments")
            } else {
                format!("e.g. {example}")
            }));
        }
        for (k, s, _) in &kw {
            if !keys.contains(&k.as_str()) {
                let help = if keys.is_empty() {
                    format!("`{kind}` takes no arguments")
                } else {
                    let list: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
                    format!("`{kind}` takes {}, e.g. {example}", list.join(", "))
                };
                return Err(Diag::new(
                    s.clone(),
                    format!("unknown argument `{k}` for initializer `{kind}`"),
                )
                .label("unknown argument")
                .help(help));
            }
        }
        if let Some(missing) = keys.iter().find(|k| !kw.iter().any(|(x, _, _)| x == *k)) {
            return Err(Diag::new(
                span,
                format!("initializer `{kind}` needs argument `{missing}`"),
            )
            .label(format!("`{missing}` missing"))
            .help(format!("e.g. {example}")));
        }
        let get = |k: &str| {
            kw.iter()
                .find(|(x, _, _)| x == k)
                .map(|(_, _, t)| t)
                .expect("checked")
        };
        let f = |k: &str| -> Result<f32, Diag> { float_of(get(k)).expect("checked number") };
        let seed = |k: &str| -> Result<u64, Diag> {
            let t = get(k);
            let v = match int_of(t) {
                Some(v) => v?,
                None => {
                    return Err(
                        Diag::new(t.span.clone(), format!("`{k}` must be an integer"))
                            .label("not an integer"),
                    )
                }
            };
            u64::try_from(v).map_err(|_| {
                Diag::new(
                    t.span.clone(),
                    format!("`{k}` must be between 0 and {}", u64::MAX),
                )
                .label("out of range")
            })
        };
        let init = match kind.as_str() {
            "zeros" => Init::Zeros,
            "ones" => Init::Ones,
            "constant" => Init::Constant(f("value")?),
            "uniform" => Init::Uniform {
                low: f("low")?,
                high: f("high")?,
                seed: seed("seed")?,
            },
            "normal" => Init::Normal {
                mean: f("mean")?,
                std: f("std")?,
                seed: seed("seed")?,
            },
            "xavier" => Init::Xavier {
                seed: seed("seed")?,
            },
            _ => Init::He {
                seed: seed("seed")?,
            },
        };
        Ok((init, span))
    }

    /// `[ scalar, ... ]`, converted to the declared dtype and shape.
    fn literal(&mut self, ty: &TypeAst, name: &Name) -> Result<(Tensor, Span), Diag> {
        let open = self.bump()?;
        if open.tok != Tok::Punct('[') {
            return Err(self
                .unexpected(&open, "`[` starting the constant's data")
                .help("constant data is a flat, row-major list, e.g. `[1, 2, 3]`"));
        }
        let mut elems: Vec<Token> = vec![];
        let end = if self.peek_is(']')? {
            self.bump()?.span.end
        } else {
            loop {
                let e = self.bump()?;
                let ok = matches!(&e.tok, Tok::Number { .. })
                    || matches!(&e.tok, Tok::Ident(w) if matches!(w.as_str(), "true" | "false" | "inf" | "nan"));
                if !ok {
                    let mut d = self.unexpected(&e, "a number, `true` or `false`");
                    if e.tok == Tok::Punct('[') {
                        d = d.help("constant data is a flat, row-major list, e.g. `[1, 2, 3, 4]`");
                    }
                    return Err(d);
                }
                elems.push(e);
                let c = self.bump()?;
                match c.tok {
                    Tok::Punct(',') => {}
                    Tok::Punct(']') => break c.span.end,
                    _ => return Err(self.unexpected(&c, "`,` or `]`")),
                }
            }
        };
        let span = open.span.start..end;
        let numel = ty.ty.numel();
        if elems.len() != numel {
            return Err(Diag::new(
                span,
                format!(
                    "constant `%{}` is declared {} ({}), but its data has {}",
                    value_name(&name.text),
                    ty.ty,
                    plural(numel, "element"),
                    plural(elems.len(), "element")
                ),
            )
            .label(format!("{} here", plural(elems.len(), "element")))
            .related(ty.span.clone(), "declared here"));
        }
        let shape = IxDyn(&ty.ty.shape);
        let wrong = |e: &Token, want: &str| {
            Diag::new(
                e.span.clone(),
                format!(
                    "expected {want} in {} constant, found {}",
                    ty.ty.dtype,
                    e.tok.describe()
                ),
            )
            .label(format!("not {want}"))
            .related(ty.span.clone(), "declared here")
        };
        let tensor = match ty.ty.dtype {
            DType::F32 => {
                let mut v = Vec::with_capacity(elems.len());
                for e in &elems {
                    match float_of(e) {
                        Some(x) => v.push(x?),
                        None => return Err(wrong(e, "a number")),
                    }
                }
                ArrayD::from_shape_vec(shape, v).map(Tensor::F32)
            }
            DType::I64 => {
                let mut v = Vec::with_capacity(elems.len());
                for e in &elems {
                    match i64_of(e) {
                        Some(x) => v.push(x?),
                        None => return Err(wrong(e, "an integer")),
                    }
                }
                ArrayD::from_shape_vec(shape, v).map(Tensor::I64)
            }
            DType::Bool => {
                let mut v = Vec::with_capacity(elems.len());
                for e in &elems {
                    match &e.tok {
                        Tok::Ident(w) if w == "true" => v.push(true),
                        Tok::Ident(w) if w == "false" => v.push(false),
                        _ => return Err(wrong(e, "`true` or `false`")),
                    }
                }
                ArrayD::from_shape_vec(shape, v).map(Tensor::Bool)
            }
        };
        let tensor =
            tensor.map_err(|e| Diag::new(span.clone(), format!("bad constant data: {e}")))?;
        Ok((tensor, span))
    }

    // ----- resolution -----------------------------------------------------

    fn resolve(self, h: Header) -> Result<Graph, Diag> {
        // Every use must name a definition.
        for u in &self.uses {
            if self.defs.contains_key(&u.name.text) {
                continue;
            }
            let shown = value_name(&u.name.text);
            let cands = suggest(&u.name.text, self.defs.keys().map(String::as_str));
            let help = did_you_mean(&cands, |c| format!("`%{}`", value_name(c)));
            return Err(if u.is_output {
                Diag::new(
                    u.name.span.clone(),
                    format!("output `%{shown}` is not defined"),
                )
                .label("no value of this name")
                .help_opt(help)
            } else {
                Diag::new(u.name.span.clone(), format!("undefined value `%{shown}`"))
                    .label("not defined anywhere in the graph")
                    .help_opt(help)
            });
        }
        if !self.saw_output {
            return Err(Diag::new(
                h.name_span.clone(),
                format!("graph `{}` has no `output` statement", h.name),
            )
            .label("this graph declares no outputs")
            .related(h.close.clone(), "expected `output %value` before here")
            .help("list the graph's results, e.g. `output %y`"));
        }
        let order = self.order()?;
        let mut g = Graph::new(h.name.clone());
        for i in order {
            self.add(&mut g, &self.stmts[i])?;
        }
        let outs = self
            .outputs
            .iter()
            .map(|n| g.value_by_name(&n.text).ok_or_else(|| self.missing(n)))
            .collect::<Result<Vec<_>, _>>()?;
        g.set_outputs(outs);
        Ok(g)
    }

    fn missing(&self, n: &Name) -> Diag {
        Diag::new(
            n.span.clone(),
            format!("undefined value `%{}`", value_name(&n.text)),
        )
    }

    /// Statement indices in dependency order, source order among the ready.
    fn order(&self) -> Result<Vec<usize>, Diag> {
        let n = self.stmts.len();
        let mut indeg = vec![0usize; n];
        let mut users: Vec<Vec<usize>> = vec![vec![]; n];
        for (i, s) in self.stmts.iter().enumerate() {
            if let Kind::Node { args, .. } = &s.kind {
                for a in args {
                    let p = self.defs[&a.text].0;
                    indeg[i] += 1;
                    users[p].push(i);
                }
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> =
            (0..n).filter(|&i| indeg[i] == 0).map(Reverse).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &u in &users[i] {
                indeg[u] -= 1;
                if indeg[u] == 0 {
                    ready.push(Reverse(u));
                }
            }
        }
        if order.len() == n {
            return Ok(order);
        }
        Err(self.cycle(&indeg))
    }

    /// Describes one cycle among the statements Kahn's algorithm left over.
    fn cycle(&self, indeg: &[usize]) -> Diag {
        let remaining = |i: usize| indeg[i] > 0;
        // Each leftover node has an operand produced by a leftover node;
        // walking operands must revisit a node, closing a cycle.
        let producer_in_cycle = |i: usize| -> Option<(usize, String)> {
            match &self.stmts[i].kind {
                Kind::Node { args, .. } => args.iter().find_map(|a| {
                    let p = self.defs[&a.text].0;
                    remaining(p).then(|| (p, a.text.clone()))
                }),
                _ => None,
            }
        };
        let start = (0..indeg.len()).find(|&i| remaining(i)).unwrap_or(0);
        let mut walk: Vec<(usize, String)> = vec![];
        let mut pos: HashMap<usize, usize> = HashMap::new();
        let mut cur = start;
        loop {
            if let Some(&at) = pos.get(&cur) {
                walk.drain(..at);
                break;
            }
            let Some((p, v)) = producer_in_cycle(cur) else {
                break;
            };
            pos.insert(cur, walk.len());
            walk.push((cur, v));
            cur = p;
        }
        // walk[i] uses value walk[i].1, produced by walk[i+1]: reverse for
        // dataflow order, pairing each node with the value it passes on.
        let k = walk.len().max(1);
        let mut flow: Vec<(usize, String)> = (0..walk.len())
            .map(|i| {
                let node = walk[(i + 1) % k].0;
                (node, walk[i].1.clone())
            })
            .collect();
        flow.reverse();
        let first = flow
            .iter()
            .enumerate()
            .min_by_key(|(_, (s, _))| *s)
            .map_or(0, |(i, _)| i);
        flow.rotate_left(first);
        let mut names: Vec<String> = flow
            .iter()
            .map(|(_, v)| format!("`%{}`", value_name(v)))
            .collect();
        if let Some(f) = names.first().cloned() {
            names.push(f);
        }
        let at = flow.first().map_or(start, |(s, _)| *s);
        Diag::new(
            self.stmts[at].span.clone(),
            format!("values form a cycle: {}", names.join(" -> ")),
        )
        .label("this node depends on its own result")
        .help(
            "a value cannot be computed from itself; check the operands of the nodes in the cycle",
        )
    }

    /// Adds one statement to the graph, checking inferred against declared
    /// types.
    fn add(&self, g: &mut Graph, s: &Stmt) -> Result<(), Diag> {
        let name = &s.results[0];
        let graph_err = |e: GraphError| Diag::new(s.span.clone(), e.to_string());
        match &s.kind {
            Kind::Input(t) => {
                g.add_input(&name.text, t.ty.clone()).map_err(graph_err)?;
            }
            Kind::Param(t, init) => {
                g.add_param(&name.text, t.ty.clone(), init.clone())
                    .map_err(graph_err)?;
            }
            Kind::Const(data) => {
                g.add_constant(&name.text, data.clone())
                    .map_err(graph_err)?;
            }
            Kind::Node { op, args, types } => {
                let mut ids = Vec::with_capacity(args.len());
                for a in args {
                    ids.push(g.value_by_name(&a.text).ok_or_else(|| self.missing(a))?);
                }
                let names: Vec<&str> = s.results.iter().map(|r| r.text.as_str()).collect();
                let added = catch_unwind(AssertUnwindSafe(|| g.add_node(op.clone(), &ids, &names)));
                let inputs_help = || {
                    let list: Vec<String> = ids
                        .iter()
                        .map(|&v| {
                            let val = g.value(v);
                            format!("`%{}`: {}", value_name(&val.name), val.ty)
                        })
                        .collect();
                    if list.is_empty() {
                        "no inputs".to_string()
                    } else {
                        format!("inputs are {}", list.join(", "))
                    }
                };
                let outs = match added {
                    Ok(Ok(outs)) => outs,
                    Ok(Err(GraphError::Type { message, .. })) => {
                        return Err(
                            Diag::new(s.span.clone(), format!("{}: {message}", op.name()))
                                .label("type error in this node")
                                .help(inputs_help()),
                        )
                    }
                    Ok(Err(e)) => return Err(graph_err(e)),
                    Err(_) => {
                        return Err(Diag::new(
                            s.span.clone(),
                            format!(
                                "{}: sizes are too large to compute this node's type",
                                op.name()
                            ),
                        )
                        .label("arithmetic overflow in shape inference")
                        .help(inputs_help()))
                    }
                };
                for ((&v, declared), r) in outs.iter().zip(types).zip(&s.results) {
                    let inferred = &g.value(v).ty;
                    if !type_fits(&inferred.shape) {
                        return Err(Diag::new(
                            s.span.clone(),
                            format!(
                                "{}: result `%{}` would have too many elements",
                                op.name(),
                                value_name(&r.text)
                            ),
                        )
                        .label("more than 2^63 elements")
                        .help(inputs_help()));
                    }
                    if let Some(d) = declared {
                        if d.ty != *inferred {
                            return Err(Diag::new(
                                d.span.clone(),
                                format!(
                                    "`%{}` is declared {} but {} produces {}",
                                    value_name(&r.text),
                                    d.ty,
                                    op.name(),
                                    inferred
                                ),
                            )
                            .label(format!("inferred type is {inferred}"))
                            .help(inputs_help()));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
