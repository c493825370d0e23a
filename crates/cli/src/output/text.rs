//! Text for people: the outcome's own `Display`.

use super::Exporter;
use anyhow::Result;
use std::fmt::Display;

pub struct Text;

impl<T: Display + ?Sized> Exporter<T> for Text {
    fn render(&self, outcome: &T) -> Result<String> {
        Ok(format!("{outcome}\n"))
    }
}
