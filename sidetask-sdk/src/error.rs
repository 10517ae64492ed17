//! The one error type of the SDK.
use crate::lifecycle::{State, TransitionError};
use std::fmt;

#[derive(Debug)]
pub enum SdkError {
    /// A lifecycle transition the state machine does not allow.
    Transition(TransitionError),
    /// An allocation would exceed the memory budget (the agent's grant or the configured cap).
    OverBudget {
        requested: u64,
        held: u64,
        limit: u64,
    },
    /// No CUDA driver library could be loaded (`libcuda.so.1` not on the library path).
    NoDriver,
    /// A CUDA driver call failed.
    Driver(String),
    /// A bad configuration (JSON or values).
    Config(String),
    /// The side task's own code failed (init or step).
    Task(String),
    /// The operation needs a state the task is not in.
    WrongState {
        expected: &'static str,
        actual: State,
    },
    Io(std::io::Error),
}

pub type Result<T, E = SdkError> = std::result::Result<T, E>;

impl fmt::Display for SdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SdkError::Transition(e) => write!(f, "{e}"),
            SdkError::OverBudget {
                requested,
                held,
                limit,
            } => write!(
                f,
                "device memory over budget: {requested} B requested, {held} B held, limit {limit} B"
            ),
            SdkError::NoDriver => write!(
                f,
                "no CUDA driver: libcuda.so.1 could not be loaded (set LD_LIBRARY_PATH)"
            ),
            SdkError::Driver(m) => write!(f, "CUDA driver error: {m}"),
            SdkError::Config(m) => write!(f, "bad side-task config: {m}"),
            SdkError::Task(m) => write!(f, "side task failed: {m}"),
            SdkError::WrongState { expected, actual } => {
                write!(f, "task is {actual}, this needs {expected}")
            }
            SdkError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SdkError {}

impl From<TransitionError> for SdkError {
    fn from(e: TransitionError) -> Self {
        SdkError::Transition(e)
    }
}

impl From<std::io::Error> for SdkError {
    fn from(e: std::io::Error) -> Self {
        SdkError::Io(e)
    }
}

impl From<cudarc::driver::DriverError> for SdkError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        SdkError::Driver(format!("{e:?}"))
    }
}
