//! Placeholder: the binding is being built.
