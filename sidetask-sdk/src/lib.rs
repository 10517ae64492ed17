//! Side-task SDK (issue 5).
pub use cudarc::driver::result as cu;
