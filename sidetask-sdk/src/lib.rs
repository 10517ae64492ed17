//! Side-task SDK (issue 5).
