//! Shared-memory layout and event/grant formats (versioned). Filled in by issue 3.
