//! Why a row of the reference data (`reproduce`) is refused: each a check
//! the shipped data must pass, named so a test can tell which failed.

/// One check a reference row failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RowError {
    #[error("study '{0}' is not one of 000..004")]
    UnknownStudy(String),
    #[error("{0} is empty")]
    Empty(&'static str),
    #[error("value {0} is not a positive number")]
    NotPositive(f64),
    #[error("local value {0} is not a positive number")]
    LocalNotPositive(f64),
    #[error("unknown unit '{0}'")]
    UnknownUnit(String),
    #[error("field '{field}' does not fit unit '{unit}'")]
    FieldUnit { field: String, unit: String },
    #[error("a relative_to row needs unit x, the p50 field and an experiment")]
    RelativeNeedsRatio,
    #[error("relative_to names no parameter to change")]
    RelativeChangesNothing,
    #[error("path kind '{kind}' is not one of {accepted}")]
    PathKind { kind: String, accepted: String },
    #[error("path words are empty")]
    PathWordsEmpty,
    #[error("a row with a path object pins no path parameter")]
    PathPinned,
    #[error("a local figure needs a path, no relative_to and the p50 field")]
    LocalNeedsPath,
    #[error("the local figure's unit '{local}' is not of the kind of '{unit}'")]
    LocalUnit { local: String, unit: String },
    #[error("a figure in cycles needs the machine's clock_ghz")]
    CyclesNeedClock,
    #[error("'{0}' is not an experiment id")]
    NotAnExperimentId(String),
}

/// Why a matching measurement cannot be put beside a reference figure:
/// shown in the row as `not comparable: ...`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Incomparable {
    #[error("the measurement carries no model prediction")]
    NoPrediction,
    #[error("the measurements have no numeric '{0}'")]
    NoNumericParam(String),
    #[error("unknown unit")]
    UnknownUnit,
    #[error("the measurement is in {measured}, the reference in {reference}")]
    Units {
        measured: osprobe_core::Unit,
        reference: String,
    },
}
