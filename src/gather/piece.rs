//! One column gathered from many pieces by (piece, row) locations ([`PieceGather`]): the
//! column phase of `corank sort`.

use super::Column;
use crate::error::{Error, Result};
use arrow::array::{Array, ArrayRef};
use arrow::compute::interleave;

/// One column of several arrays (pieces) gathered by (piece, row within the piece)
/// locations, read through the pieces' addresses as [`gather`](super::gather) reads a column of its runs
/// (arrow's `interleave` for the types it does not read so: booleans, lists, structs,
/// dictionaries). Built once for many gathers: the column phase of `corank sort` gathers
/// each output row group's values from every input row group's piece.
pub(crate) struct PieceGather {
    /// The pieces: the column's addresses point into their buffers.
    _pieces: Vec<ArrayRef>,
    /// Each piece's length.
    lengths: Vec<usize>,
    column: Column,
}

impl PieceGather {
    /// The gather of `pieces` (all of one type; none gathers nothing).
    pub(crate) fn new(pieces: Vec<ArrayRef>) -> Result<Self> {
        let Some(data_type) = pieces.first().map(|p| p.data_type().clone()) else {
            return Ok(PieceGather { _pieces: pieces, lengths: vec![], column: Column::Interleave(vec![]) });
        };
        if let Some(other) = pieces.iter().find(|p| p.data_type() != &data_type) {
            return Err(Error::InvalidArgument(format!("arrays of {data_type} and {} gathered as one column", other.data_type())));
        }
        let column = Column::by_address(pieces.clone(), &data_type);
        let lengths = pieces.iter().map(|p| p.len()).collect();
        Ok(PieceGather { _pieces: pieces, lengths, column })
    }

    /// The values at `from` (piece, row within the piece) as one array.
    pub(crate) fn gather(&self, from: &[(usize, usize)]) -> Result<ArrayRef> {
        // The address reads need every location inside its piece.
        let outside = |&&(piece, row): &&(usize, usize)| self.lengths.get(piece).is_none_or(|&n| row >= n);
        if let Some((piece, row)) = from.iter().find(outside) {
            return Err(Error::InvalidArgument(format!("row {row} of piece {piece} gathered from {} pieces", self.lengths.len())));
        }
        Ok(match &self.column {
            Column::Fixed(fixed) => fixed.gather(from)?,
            Column::View(views) => views.gather(from),
            Column::Bytes(bytes) => bytes.gather(from)?,
            Column::Interleave(arrays) => {
                let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                interleave(&refs, from)?
            }
            Column::Dictionary(_) => return Err(Error::Internal("a dictionary column built for a piece gather".into())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, DictionaryArray, Int32Array, Int64Array, ListArray, StringArray, StringViewArray};
    use arrow::datatypes::{Int32Type, Int8Type};
    use std::sync::Arc;

    /// Pieces of one column each (sliced, some with nulls), of the types read by address and
    /// of those interleaved.
    fn columns_of_pieces() -> Vec<Vec<ArrayRef>> {
        let piece = |p: usize| -> Vec<ArrayRef> {
            let n = 20 + p;
            let valid = |i: usize| p != 1 || i % 4 != 1;
            let cols: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter((0..n).map(|i| valid(i).then_some((p * 1000 + i) as i64)))),
                Arc::new(StringArray::from_iter((0..n).map(|i| valid(i).then(|| format!("p{p}:{}", "s".repeat(i % 5)))))),
                Arc::new(StringViewArray::from_iter((0..n).map(|i| valid(i).then(|| format!("piece {p}, a long enough value {i}"))))),
                Arc::new(BooleanArray::from_iter((0..n).map(|i| valid(i).then_some(i % 3 == p % 2)))),
                Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>((0..n).map(|i| valid(i).then(|| vec![Some(i as i32); p])))),
                Arc::new((0..n).map(|i| ["x", "y", "z"][(i + p) % 3]).collect::<DictionaryArray<Int8Type>>()),
            ];
            cols.into_iter().map(|a| a.slice(1, n - 1)).collect()
        };
        let pieces: Vec<Vec<ArrayRef>> = (0..4).map(piece).collect();
        (0..pieces[0].len()).map(|c| pieces.iter().map(|p| p[c].clone()).collect()).collect()
    }

    #[test]
    fn piece_gather_gives_interleave() {
        for column in columns_of_pieces() {
            let gather = PieceGather::new(column.clone()).unwrap();
            let from: Vec<(usize, usize)> = (0..200).map(|i| (i * 7 % 4, i * 13 % 19)).collect();
            let refs: Vec<&dyn Array> = column.iter().map(|a| a.as_ref()).collect();
            for rows in [&from[..], &from[..1], &[]] {
                let want = interleave(&refs, rows).unwrap();
                assert_eq!(gather.gather(rows).unwrap().to_data(), want.to_data(), "{}", column[0].data_type());
            }
        }
    }

    #[test]
    fn piece_gather_refuses_rows_outside_and_mixed_types() {
        let column = columns_of_pieces().swap_remove(0);
        let gather = PieceGather::new(column.clone()).unwrap();
        let last = column[3].len();
        assert!(gather.gather(&[(3, last - 1)]).is_ok());
        for outside in [(3, last), (4, 0)] {
            assert!(matches!(gather.gather(&[(0, 0), outside]), Err(Error::InvalidArgument(_))), "{outside:?}");
        }
        let mixed = vec![column[0].clone(), Arc::new(Int32Array::from(vec![1])) as ArrayRef];
        assert!(matches!(PieceGather::new(mixed), Err(Error::InvalidArgument(_))));
        assert!(PieceGather::new(vec![]).unwrap().gather(&[(0, 0)]).is_err());
    }
}
