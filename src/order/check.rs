//! The optional sortedness check of the input runs: names the run and the first row out
//! of order.

use super::ties::FullComparator;
use crate::error::{Error, Result};
use crate::keys::EncodedKeys;
use arrow::array::ArrayRef;
use arrow::util::display::array_value_to_string;
use rayon::prelude::*;
use std::cmp::Ordering;

/// Checks every run is sorted by the key order (and by the full comparator where keys tie
/// and the encoding is not exact). `runs` are the key columns, used for the message.
pub fn check_sorted(encoded: &EncodedKeys, full: Option<&FullComparator>, runs: &[Vec<ArrayRef>]) -> Result<()> {
    let offsets = &encoded.run_offsets;
    let first_bad = (0..offsets.len() - 1)
        .into_par_iter()
        .filter_map(|r| {
            (offsets[r] + 1..offsets[r + 1])
                .find(|&g| match encoded.keys.cmp_words(g - 1, g) {
                    Ordering::Greater => true,
                    Ordering::Equal if !encoded.exact => full.is_some_and(|f| f.cmp(g - 1, g) == Ordering::Greater),
                    _ => false,
                })
                .map(|g| (r, g - offsets[r]))
        })
        .min();
    match first_bad {
        None => Ok(()),
        Some((run, row)) => {
            let show = |i: usize| {
                runs[run].iter().map(|c| array_value_to_string(c, i).unwrap_or_else(|_| "?".into())).collect::<Vec<_>>().join(", ")
            };
            Err(Error::NotSorted { run, row, detail: format!("key ({}) follows ({})", show(row), show(row - 1)) })
        }
    }
}
