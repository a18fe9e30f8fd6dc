//! Shared helpers for workspace integration tests.
