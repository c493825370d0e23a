//! The timer service (seed 000 section 2): to be written.
