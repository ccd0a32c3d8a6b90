//! `gradsleuth repro`'s reasoning, free of processes: which statements a script can lose
//! ([`reduce`]: delta debugging over the syntax tree with an oracle the caller provides, and the
//! rewrites it tries beside removals, [`rewrite`]),
//! local modules pasted in so the result stands alone ([`inline`]), whether a run still shows
//! the same finding ([`target`]), and the files of a bug report ([`kit`]).

pub mod data;
pub mod fold;
pub mod inline;
pub mod kit;
pub mod reduce;
pub mod rewrite;
pub mod target;

pub use reduce::{reduce, Reduced};
pub use target::Target;
