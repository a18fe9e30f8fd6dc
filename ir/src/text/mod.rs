//! The text format: printer and parser (in progress).
