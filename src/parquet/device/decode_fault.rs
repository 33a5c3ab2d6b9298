//! What can be wrong with a data page's decompressed bytes, as a code the device kernels
//! write to a page's error word (`cuda/parquet_decode.cu`, `FAULT_*`, the same numbers) and
//! the CPU reference returns. 0 is no fault.

use std::fmt;

/// A page's decode fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Fault {
    /// A v1 page's definition levels' 4-byte length, or the length it states, runs past
    /// the page.
    LevelsLength = 1,
    /// The definition levels end before the page's values do.
    LevelsEnd = 2,
    /// A definition level above the column's maximum (1).
    LevelValue = 3,
    /// A run header longer than 32 bits.
    RunHeader = 4,
    /// PLAIN values run past the page.
    ValuesEnd = 5,
    /// A dictionary-encoded page without its bit-width byte, or a bit width over 32.
    BitWidth = 6,
    /// The dictionary indices end before the page's defined values do.
    IndicesEnd = 7,
    /// A dictionary index past the dictionary's entries.
    IndexRange = 8,
    /// A v2 page whose levels count other nulls than its header.
    NullCount = 9,
    /// The launch's own arguments are inconsistent (the host's bug, not the file's).
    Launch = 10,
    /// A byte array dictionary page whose entries' lengths run past it.
    DictionaryEnd = 11,
    /// A byte array chunk whose values' bytes do not fit the i32 offsets of its Arrow type.
    OffsetOverflow = 12,
    /// A value of a string column that is not UTF-8.
    Utf8 = 13,
    /// A DELTA_BINARY_PACKED header that is cut, too long or inconsistent, or a bit width
    /// wider than the type.
    DeltaHeader = 14,
    /// DELTA_BINARY_PACKED values that end before the page's defined values do.
    DeltaEnd = 15,
}

impl Fault {
    /// Every fault, in code order.
    pub const ALL: [Fault; 15] = [
        Fault::LevelsLength,
        Fault::LevelsEnd,
        Fault::LevelValue,
        Fault::RunHeader,
        Fault::ValuesEnd,
        Fault::BitWidth,
        Fault::IndicesEnd,
        Fault::IndexRange,
        Fault::NullCount,
        Fault::Launch,
        Fault::DictionaryEnd,
        Fault::OffsetOverflow,
        Fault::Utf8,
        Fault::DeltaHeader,
        Fault::DeltaEnd,
    ];

    /// The fault of a page's error word (`None` for 0, or a code no kernel writes).
    pub fn from_code(code: u32) -> Option<Fault> {
        Fault::ALL.iter().copied().find(|f| *f as u32 == code)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::LevelsLength => "its definition levels' length runs past the page",
            Fault::LevelsEnd => "its definition levels end before its values",
            Fault::LevelValue => "a definition level above the column's maximum of 1",
            Fault::RunHeader => "a run header longer than 32 bits",
            Fault::ValuesEnd => "its PLAIN values (or a byte array's length) run past the page",
            Fault::BitWidth => "its dictionary indices have no bit width or one over 32",
            Fault::IndicesEnd => "its dictionary indices end before its values",
            Fault::IndexRange => "a dictionary index past the dictionary's entries",
            Fault::NullCount => "its definition levels count other nulls than its header",
            Fault::Launch => "the decode launch's arguments are inconsistent",
            Fault::DictionaryEnd => "its dictionary's byte array entries run past the dictionary page",
            Fault::OffsetOverflow => "its values take more than 2 GiB, past the i32 offsets of its Arrow type",
            Fault::Utf8 => "a value of a string column is not UTF-8",
            Fault::DeltaHeader => "its DELTA_BINARY_PACKED header is damaged",
            Fault::DeltaEnd => "its DELTA_BINARY_PACKED values end before its values do",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Fault;
    use crate::engine::decode_job as job;

    /// `#define NAME <n>u` of the kernel's source.
    fn defined(name: &str) -> u32 {
        let src = include_str!("../../../cuda/parquet_decode.cu");
        let line = src.lines().find(|l| l.split_whitespace().nth(1) == Some(name)).unwrap_or_else(|| panic!("{name} is not defined"));
        let v = line.split_whitespace().nth(2).unwrap().trim_end_matches('u');
        if let Some(hex) = v.strip_prefix("0x") {
            u32::from_str_radix(hex, 16).unwrap()
        } else {
            v.parse().unwrap()
        }
    }

    /// The kernel's fault codes and flags are the host's.
    #[test]
    fn codes_match_the_kernel() {
        let names = [
            "FAULT_LEVELS_LENGTH",
            "FAULT_LEVELS_END",
            "FAULT_LEVEL_VALUE",
            "FAULT_RUN_HEADER",
            "FAULT_VALUES_END",
            "FAULT_BIT_WIDTH",
            "FAULT_INDICES_END",
            "FAULT_INDEX_RANGE",
            "FAULT_NULL_COUNT",
            "FAULT_LAUNCH",
            "FAULT_DICTIONARY_END",
            "FAULT_OFFSET_OVERFLOW",
            "FAULT_UTF8",
            "FAULT_DELTA_HEADER",
            "FAULT_DELTA_END",
        ];
        for (f, name) in Fault::ALL.iter().zip(names) {
            assert_eq!(defined(name), *f as u32, "{name}");
            assert_eq!(Fault::from_code(*f as u32), Some(*f));
        }
        assert_eq!(Fault::from_code(0), None);
        assert_eq!(defined("LEVELS_NONE"), job::LEVELS_NONE);
        assert_eq!(defined("LEVELS_PREFIXED"), job::LEVELS_PREFIXED);
        assert_eq!(defined("LEVELS_STATED"), job::LEVELS_STATED);
        assert_eq!(defined("FLAG_DICTIONARY"), job::FLAG_DICTIONARY);
        assert_eq!(defined("FLAG_SIGN_EXTEND"), job::FLAG_SIGN_EXTEND);
        assert_eq!(defined("NULLS_UNCHECKED"), job::NULLS_UNCHECKED);
        assert_eq!(defined("FLAG_BYTES"), job::FLAG_BYTES);
        assert_eq!(defined("FLAG_BIG_ENDIAN"), job::FLAG_BIG_ENDIAN);
        assert_eq!(defined("FLAG_DELTA"), job::FLAG_DELTA);
    }
}
