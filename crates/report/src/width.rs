//! How wide the terminal output may be.

/// Width used when stdout is not a terminal and $COLUMNS is not set: wide
/// enough for the main columns, narrow enough for a mail or an issue.
pub const PIPED_WIDTH: usize = 100;

/// Narrower than this, tables are not worth laying out: they are cut.
pub const MIN_WIDTH: usize = 40;

/// The width for terminal output: $COLUMNS when set to a number (as `ls`
/// honours it, so `COLUMNS=80 osprobe run | less` works), else the size of
/// the terminal on stdout, else [`PIPED_WIDTH`].
pub fn terminal_width() -> usize {
    let from_env = std::env::var("COLUMNS").ok();
    width_from(from_env.as_deref(), stdout_columns())
}

/// The rule of [`terminal_width`] on its inputs.
pub fn width_from(columns_env: Option<&str>, tty_columns: Option<usize>) -> usize {
    columns_env
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&w| w > 0)
        .or(tty_columns)
        .unwrap_or(PIPED_WIDTH)
        .max(MIN_WIDTH)
}

/// Columns of the terminal on stdout (TIOCGWINSZ); None when stdout is not
/// a terminal or reports no size.
fn stdout_columns() -> Option<usize> {
    // SAFETY: winsize is plain data; TIOCGWINSZ writes into it and nothing
    // else; a failure leaves it zeroed and is checked.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_then_terminal_then_a_default() {
        assert_eq!(width_from(Some("132"), Some(80)), 132);
        assert_eq!(width_from(Some("junk"), Some(80)), 80);
        assert_eq!(width_from(None, Some(80)), 80);
        assert_eq!(width_from(None, None), PIPED_WIDTH);
        assert_eq!(width_from(Some("0"), None), PIPED_WIDTH);
        assert_eq!(width_from(Some("10"), None), MIN_WIDTH);
    }
}
