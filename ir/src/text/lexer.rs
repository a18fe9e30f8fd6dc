//! Tokenizer for the text format. Produces tokens on demand so the first
//! error in the file is the one reported, whichever phase finds it.

use super::error::Diag;
use std::ops::Range;

/// Byte range into the source.
pub(crate) type Span = Range<usize>;

/// What a token is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    /// `[A-Za-z_][A-Za-z0-9_]*`: keywords, op names, dtypes, words.
    Ident(String),
    /// `%name` or `%"name"`, the name unescaped.
    Value(String),
    /// `"..."`, unescaped.
    Str(String),
    /// A number exactly as written (sign included); `float` when it has a
    /// fraction or exponent, or is `-inf` / `-nan`.
    Number { text: String, float: bool },
    /// One of `{ } ( ) [ ] , = :`.
    Punct(char),
    /// End of input.
    Eof,
}

/// A token and where it is.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

impl Tok {
    /// How the token is named in "found ..." messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Value(s) => format!("value `%{}`", super::printer::value_name(s)),
            Tok::Str(s) => format!("string {}", crate::init::quote(s)),
            Tok::Number { text, .. } => format!("number `{text}`"),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::Eof => "end of file".to_string(),
        }
    }
}

/// Characters allowed in a bare (unquoted) value name.
pub(crate) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '-')
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The lexer: a cursor over the source.
pub(crate) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Self {
        // A byte-order mark is not part of the text.
        let pos = if src.starts_with('\u{feff}') { 3 } else { 0 };
        Lexer { src, pos }
    }

    fn peek_char(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn char_at(&self, at: usize) -> Option<char> {
        self.src.get(at..).and_then(|s| s.chars().next())
    }

    fn skip_trivia(&mut self) {
        while let Some(c) = self.peek_char() {
            if c.is_whitespace() {
                self.pos += c.len_utf8();
            } else if c == '#' {
                match self.src[self.pos..].find('\n') {
                    Some(i) => self.pos += i + 1,
                    None => self.pos = self.src.len(),
                }
            } else {
                break;
            }
        }
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let start = self.pos;
        while let Some(c) = self.peek_char() {
            if !f(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        &self.src[start..self.pos]
    }

    /// The next token, or a diagnostic for malformed text.
    pub fn next_token(&mut self) -> Result<Token, Diag> {
        self.skip_trivia();
        let start = self.pos;
        let Some(c) = self.peek_char() else {
            return Ok(Token {
                tok: Tok::Eof,
                span: start..start,
            });
        };
        let tok = match c {
            '{' | '}' | '(' | ')' | '[' | ']' | ',' | '=' | ':' => {
                self.pos += 1;
                Tok::Punct(c)
            }
            '%' => {
                self.pos += 1;
                Tok::Value(self.value_name(start)?)
            }
            '"' => Tok::Str(self.string()?),
            '-' | '0'..='9' => self.number(start)?,
            c if is_ident_start(c) => Tok::Ident(self.take_while(is_ident_char).to_string()),
            c => {
                let end = start + c.len_utf8();
                let shown = if c.is_control() || c.is_whitespace() {
                    format!("{:?}", c)
                } else {
                    format!("`{c}`")
                };
                return Err(
                    Diag::new(start..end, format!("unexpected character {shown}"))
                        .label("not valid here"),
                );
            }
        };
        Ok(Token {
            tok,
            span: start..self.pos,
        })
    }

    /// After `%`: a bare name or a quoted string.
    fn value_name(&mut self, start: usize) -> Result<String, Diag> {
        if self.peek_char() == Some('"') {
            return self.string();
        }
        let name_start = self.pos;
        let greedy = self.take_while(is_name_char);
        // A trailing `:` belongs to the type annotation, not the name.
        let mut name = greedy.trim_end_matches(':');
        // `%x:f32[2]` (no space) means name `x` of type `f32[2]`.
        if self.peek_char() == Some('[') && name == greedy {
            for dt in [":f32", ":i64", ":bool"] {
                if name.len() > dt.len() && name.ends_with(dt) {
                    name = &name[..name.len() - dt.len()];
                    break;
                }
            }
        }
        self.pos = name_start + name.len();
        if name.is_empty() {
            let found = match self.peek_char() {
                None => "end of file".to_string(),
                Some(c) => format!("`{c}`"),
            };
            return Err(Diag::new(start..self.pos.max(start + 1), format!(
                "expected a value name after `%`, found {found}"
            ))
            .label("value name missing")
            .help("bare names use letters, digits and `_ . : / -`; quote any other name, e.g. %\"my value\""));
        }
        Ok(name.to_string())
    }

    /// A `"..."` string starting at the current position.
    fn string(&mut self) -> Result<String, Diag> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek_char() else {
                return Err(Diag::new(start..start + 1, "unterminated string")
                    .label("string starts here")
                    .help("close the string with `\"` on the same line"));
            };
            match c {
                '"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                '\n' => {
                    return Err(Diag::new(start..self.pos, "unterminated string")
                        .label("string not closed before the end of the line")
                        .help("write a newline inside a string as `\\n`"));
                }
                '\\' => {
                    let esc_start = self.pos;
                    self.pos += 1;
                    let e = self.peek_char();
                    let unescaped = match e {
                        Some('"') => '"',
                        Some('\\') => '\\',
                        Some('n') => '\n',
                        Some('t') => '\t',
                        Some('r') => '\r',
                        _ => {
                            let end = self.pos + e.map_or(0, char::len_utf8);
                            return Err(Diag::new(esc_start..end, "unknown escape in string")
                                .label("not a valid escape")
                                .help("valid escapes are \\\" \\\\ \\n \\t \\r"));
                        }
                    };
                    self.pos += 1;
                    out.push(unescaped);
                }
                c => {
                    self.pos += c.len_utf8();
                    out.push(c);
                }
            }
        }
    }

    /// A number: `-?digits[.digits][(e|E)[+-]digits]`, or `-inf` / `-nan`.
    fn number(&mut self, start: usize) -> Result<Tok, Diag> {
        if self.peek_char() == Some('-') {
            self.pos += 1;
            match self.peek_char() {
                Some(c) if c.is_ascii_digit() => {}
                Some(c) if is_ident_start(c) => {
                    let word = self.take_while(is_ident_char);
                    if word == "inf" || word == "nan" {
                        return Ok(Tok::Number {
                            text: format!("-{word}"),
                            float: true,
                        });
                    }
                    return Err(Diag::new(start..self.pos, format!("unexpected `-{word}`"))
                        .label("expected a number after `-`"));
                }
                _ => {
                    return Err(Diag::new(start..start + 1, "unexpected character `-`")
                        .label("expected a number after `-`"))
                }
            }
        }
        self.take_while(|c| c.is_ascii_digit());
        let mut float = false;
        if self.peek_char() == Some('.') {
            float = true;
            self.pos += 1;
            self.take_while(|c| c.is_ascii_digit());
        }
        if matches!(self.peek_char(), Some('e' | 'E')) {
            let save = self.pos;
            let mut p = self.pos + 1;
            if matches!(self.char_at(p), Some('+' | '-')) {
                p += 1;
            }
            if matches!(self.char_at(p), Some(c) if c.is_ascii_digit()) {
                self.pos = p;
                self.take_while(|c| c.is_ascii_digit());
                float = true;
            } else {
                self.pos = save;
            }
        }
        Ok(Tok::Number {
            text: self.src[start..self.pos].to_string(),
            float,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        let mut l = Lexer::new(s);
        let mut out = vec![];
        loop {
            let t = l.next_token().unwrap();
            if t.tok == Tok::Eof {
                return out;
            }
            out.push(t.tok);
        }
    }

    #[test]
    fn value_names_leave_the_type_colon() {
        assert_eq!(
            toks("%x: %a::b: %c:f32[ %d:f32: %\"q r\""),
            vec![
                Tok::Value("x".into()),
                Tok::Punct(':'),
                Tok::Value("a::b".into()),
                Tok::Punct(':'),
                Tok::Value("c".into()),
                Tok::Punct(':'),
                Tok::Ident("f32".into()),
                Tok::Punct('['),
                Tok::Value("d:f32".into()),
                Tok::Punct(':'),
                Tok::Value("q r".into()),
            ]
        );
    }

    #[test]
    fn numbers() {
        let n = |t: &str, f: bool| Tok::Number {
            text: t.into(),
            float: f,
        };
        assert_eq!(
            toks("1 -2 1.5 1e-7 -2.0E+3 -inf inf 3e"),
            vec![
                n("1", false),
                n("-2", false),
                n("1.5", true),
                n("1e-7", true),
                n("-2.0E+3", true),
                n("-inf", true),
                Tok::Ident("inf".into()),
                n("3", false),
                Tok::Ident("e".into()),
            ]
        );
    }
}
