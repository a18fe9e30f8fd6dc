//! Parse diagnostics: a message, the span at fault, and enough context for
//! miette to render the offending source line.

use miette::{Diagnostic, LabeledSpan, NamedSource, SourceCode};
use std::fmt;
use std::ops::Range;

/// A diagnostic under construction, before it is tied to its source text.
#[derive(Clone, Debug)]
pub(crate) struct Diag {
    pub span: Range<usize>,
    pub message: String,
    pub label: Option<String>,
    pub help: Option<String>,
    /// Secondary spans, e.g. where a duplicate name was first defined.
    pub related: Vec<(Range<usize>, String)>,
}

impl Diag {
    pub fn new(span: Range<usize>, message: impl Into<String>) -> Self {
        Diag {
            span,
            message: message.into(),
            label: None,
            help: None,
            related: vec![],
        }
    }

    pub fn label(mut self, l: impl Into<String>) -> Self {
        self.label = Some(l.into());
        self
    }

    pub fn help(mut self, h: impl Into<String>) -> Self {
        self.help = Some(h.into());
        self
    }

    pub fn help_opt(mut self, h: Option<String>) -> Self {
        self.help = h;
        self
    }

    pub fn related(mut self, span: Range<usize>, l: impl Into<String>) -> Self {
        self.related.push((span, l.into()));
        self
    }

    /// Ties the diagnostic to its file, computing line and column.
    pub fn into_error(self, src: &str, file_name: &str) -> ParseError {
        let clamp = |r: Range<usize>| {
            let s = floor_boundary(src, r.start.min(src.len()));
            let e = floor_boundary(src, r.end.clamp(s, src.len()));
            s..e
        };
        let span = clamp(self.span);
        let (line, column) = line_col(src, span.start);
        ParseError(Box::new(Inner {
            message: self.message,
            file: file_name.to_string(),
            line,
            column,
            span,
            label: self.label,
            help: self.help,
            related: self
                .related
                .into_iter()
                .map(|(r, l)| (clamp(r), l))
                .collect(),
            src: NamedSource::new(file_name, src.to_string()),
        }))
    }
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let before = &src[..floor_boundary(src, offset.min(src.len()))];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

struct Inner {
    message: String,
    file: String,
    line: usize,
    column: usize,
    span: Range<usize>,
    label: Option<String>,
    help: Option<String>,
    related: Vec<(Range<usize>, String)>,
    src: NamedSource<String>,
}

/// Why a text model could not be read: the first problem found, with its
/// location. Displays as `file:line:col: message`; as a
/// [`miette::Diagnostic`] it renders the source line with the culprit
/// underlined. Boxed inside so `Result<Graph, ParseError>` stays small.
pub struct ParseError(Box<Inner>);

impl ParseError {
    /// The message, without location.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// 1-based line of the span start.
    pub fn line(&self) -> usize {
        self.0.line
    }

    /// 1-based column (in characters) of the span start.
    pub fn column(&self) -> usize {
        self.0.column
    }

    /// Byte range of the culprit in the source (empty at end of file).
    pub fn span(&self) -> Range<usize> {
        self.0.span.clone()
    }

    /// The file name given to [`crate::text::parse`].
    pub fn file_name(&self) -> &str {
        &self.0.file
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.0.file, self.0.line, self.0.column, self.0.message
        )
    }
}

impl fmt::Debug for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParseError")
            .field("message", &self.0.message)
            .field("file", &self.0.file)
            .field("line", &self.0.line)
            .field("column", &self.0.column)
            .field("span", &self.0.span)
            .field("help", &self.0.help)
            .finish()
    }
}

impl std::error::Error for ParseError {}

impl Diagnostic for ParseError {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new("dnnc::parse"))
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.0
            .help
            .as_ref()
            .map(|h| Box::new(h.as_str()) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.0.src)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let s = &self.0.span;
        let primary = LabeledSpan::new_primary_with_span(self.0.label.clone(), s.start..s.end);
        let related = self
            .0
            .related
            .iter()
            .map(|(r, l)| LabeledSpan::new_with_span(Some(l.clone()), r.start..r.end));
        Some(Box::new(std::iter::once(primary).chain(related)))
    }
}
