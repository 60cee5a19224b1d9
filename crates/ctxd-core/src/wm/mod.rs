//! Working-memory mechanisms of issue 15 that rewrite what the model sees of its own tool
//! traffic, each a pure policy over the log: [`writes`] (a write's content stripped at the tail,
//! a "what I've done" fact in its place).

pub mod writes;
