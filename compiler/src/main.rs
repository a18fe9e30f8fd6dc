//! The `dnnc` binary: parse arguments, run, report errors with exit code 2.

use clap::Parser;
use dnnc_compiler::cli::{execute_with_status, Cli};
use dnnc_compiler::DnncError;
use std::io::Write;

fn main() {
    let cli = Cli::parse();
    let mut notes = |s: &str| eprintln!("{s}");
    match execute_with_status(cli, &mut notes) {
        Ok((out, status)) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (e.g. `dnnc ir m.dnn | head`) is not an error.
            let _ = stdout.write_all(out.as_bytes());
            if status != 0 {
                let _ = stdout.flush();
                std::process::exit(status);
            }
        }
        Err(e) => {
            report(&e);
            std::process::exit(e.exit_code());
        }
    }
}

fn report(e: &DnncError) {
    match e {
        DnncError::Parse(p) => {
            let handler = miette::GraphicalReportHandler::new();
            let mut s = String::new();
            if handler.render_report(&mut s, p.as_ref()).is_ok() {
                eprintln!("{s}");
            } else {
                eprintln!("error: {p}");
            }
        }
        other => eprintln!("error: {other}"),
    }
}
