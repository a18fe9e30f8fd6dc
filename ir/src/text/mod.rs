//! The text format: dnnc's IR dump and native model description (`.dnn`).
//!
//! [`print()`] writes a graph in canonical form and [`parse`] reads it back;
//! `print(&parse(&print(g), f)?) == print(g)` for every graph. The grammar,
//! naming rules and an op reference are in `docs/ir.md`.
//!
//! ```
//! let src = "graph tiny {\n  input %x: f32[1,4]\n  %y = Relu(%x)\n  output %y\n}\n";
//! let g = dnnc_ir::text::parse(src, "tiny.dnn").unwrap();
//! assert_eq!(
//!     dnnc_ir::text::print(&g),
//!     "graph tiny {\n  input %x: f32[1,4]\n  %y: f32[1,4] = Relu(%x)\n  output %y\n}\n"
//! );
//! let err = dnnc_ir::text::parse("graph g {\n  %y = Relu(%x)\n", "g.dnn").unwrap_err();
//! assert_eq!(err.to_string(), "g.dnn:2:16: unexpected end of file: expected `}` to close graph `g`");
//! ```

mod error;
mod lexer;
mod parser;
mod printer;

pub use error::ParseError;
pub use parser::parse;
pub use printer::print;
