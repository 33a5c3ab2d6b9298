// Stop 52's experiment (docs/PERFORMANCE.md, "Where the 2-core merge's CPU goes"): decode and
// re-encode the bench's files, each file on a rayon thread, with their strings read as
// offsets (Utf8) or as views (Utf8View), zstd(3), no merge. Runs on the dev VM (no GPU):
//   cp docs/device/viewsab.rs examples/ && cargo build --release --all-features --example viewsab
//   target/release/examples/viewsab offsets|views DIR/*.parquet
// It prints the wall time and the decode and encode seconds summed over the threads.
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].clone();
    let files: Vec<String> = args[2..].to_vec();
    let t = Instant::now();
    let (rd, wr): (Vec<f64>, Vec<f64>) = files
        .par_iter()
        .map(|p| {
            let f = std::fs::File::open(p).unwrap();
            let meta = ArrowReaderMetadata::load(&f, ArrowReaderOptions::new()).unwrap();
            let meta = if mode == "views" {
                let fields: Vec<Field> = meta
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| match f.data_type() {
                        DataType::Utf8 => f.as_ref().clone().with_data_type(DataType::Utf8View),
                        _ => f.as_ref().clone(),
                    })
                    .collect();
                ArrowReaderMetadata::try_new(meta.metadata().clone(), ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(fields)))).unwrap()
            } else {
                meta
            };
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(f, meta.clone()).with_batch_size(8192).build().unwrap();
            let props = WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap())).build();
            let mut w = ArrowWriter::try_new(std::io::sink(), meta.schema().clone(), Some(props)).unwrap();
            let (mut rt, mut wt) = (0.0, 0.0);
            let mut s = Instant::now();
            for b in reader {
                let b = b.unwrap();
                rt += s.elapsed().as_secs_f64();
                s = Instant::now();
                w.write(&b).unwrap();
                wt += s.elapsed().as_secs_f64();
                s = Instant::now();
            }
            w.close().unwrap();
            wt += s.elapsed().as_secs_f64();
            (rt, wt)
        })
        .unzip();
    println!("{mode}: wall {:.2} s, decode {:.2} s, encode {:.2} s (thread sums)", t.elapsed().as_secs_f64(), rd.iter().sum::<f64>(), wr.iter().sum::<f64>());
}
