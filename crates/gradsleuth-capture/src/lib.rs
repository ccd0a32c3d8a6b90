//! Capture, in pure Rust: everything the tracer records and decides while the user's script
//! runs, with no Python in it.
//!
//! * [`Recorder`]: the capture buffer the tracer's hooks write into (modules, tensors,
//!   optimizers, backward calls, steps, `zero_grad` and scaler events, cuts), with locations
//!   resolved to snippets and cwd-relative paths as they arrive;
//! * [`oplog::OpLog`]: the op-level analysis of one deep step: cut classification, taint of
//!   tensors and Python values, in-place bookkeeping, and the attribution of unreached
//!   parameters to the cut on their path;
//! * [`site`]: which frame is the user's, and [`site::Site`], a user frame;
//! * [`holders`]: which module holds which, to name a layer called directly;
//! * [`names`]: names inside the user's model, the frameworks' wrappers named away;
//! * [`support`]: the oldest torch the tracer supports, and why;
//! * [`pickle`]: the object a pickling error names.
//!
//! The op log is generic over [`oplog::Host`], the way `gradsleuth-graph` is generic over
//! `GraphSource`: `gradsleuth-py` implements it over live Python objects (tensors, `grad_fn`
//! nodes, frames); the tests implement it over a synthetic tensor world replayed from fixture
//! files (`tests/fixtures/*.json`), so the analysis is tested with `cargo test`.

pub mod holders;
pub mod names;
pub mod oplog;
pub mod pickle;
pub mod recorder;
pub mod site;
pub mod support;

pub use oplog::{Call, Host, OpLog, SeqKind};
pub use recorder::{At, Recorder};
pub use site::{Code, CodeFilter, Site};
