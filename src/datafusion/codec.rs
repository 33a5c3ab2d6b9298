//! A `datafusion-proto` `PhysicalExtensionCodec` for [`CoRankMergeExec`] and
//! [`CoRankSortExec`], so a plan that holds them round-trips to bytes (the way Ballista and
//! datafusion-distributed ship plans).
//!
//! Encoding of the node (its input travels as the plan's child): the magic `CRNK`, a version
//! byte, then little-endian `fetch` (u64, `u64::MAX` for none), the engine (u8: 0 auto,
//! 1 cpu, 2 gpu), `window_rows` and `gpu_min_rows` (u64 each), then the sort expressions
//! as a protobuf `PhysicalSortExprNodeCollection`. Version 2 adds a flags byte after
//! `gpu_min_rows` (bit 0: `check_sorted`, bit 1: GPU failures are errors); version 3 adds the
//! kernel (u8: 0 auto, 1 basic, 2 tiled, 3 circular, 4 kway) and the device (u32) after the
//! flags; version 4 has the devices instead of the device: a tag (u8: 0 one ordinal, 1 a set,
//! 2 all) and a u64 (the ordinal, the set's bit mask, 0). Versions 1 to 3 still decode
//! (kernel auto and device 0 where they have none).
//!
//! Version 5 adds a node kind byte after the version (0 `CoRankMergeExec`, 1
//! `CoRankSortExec`), then the version 4 body; the sort node has no fetch (written as none,
//! ignored), no flags (0), and carries its `chunk_rows` (u64) between the devices and the sort
//! expressions. `CoRankMergeExec` is still written as version 4, so that decoders that know
//! only versions 1 to 4 read it; `CoRankSortExec` is written as version 5.

use super::exec::{CoRankMergeExec, MergeSettings};
use super::sort_exec::CoRankSortExec;
use crate::options::{Devices, Engine, EngineOptions, Kernel, OnGpuFailure};
use datafusion::common::{plan_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::parse_physical_sort_exprs;
use datafusion_proto::physical_plan::to_proto::serialize_physical_sort_exprs;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf::PhysicalSortExprNodeCollection;
use prost::Message;
use std::sync::Arc;

const MAGIC: &[u8; 4] = b"CRNK";
/// The newest version (the sort node's); the merge node is written as [`MERGE_VERSION`].
const VERSION: u8 = 5;
const MERGE_VERSION: u8 = 4;
const KIND_MERGE: u8 = 0;
const KIND_SORT: u8 = 1;
/// The header of a version 1 encoding; version 2 adds the flags byte, version 3 five more,
/// version 4 ten more.
const HEADER: usize = 4 + 1 + 1 + 8 * 3;
const CHECK_SORTED: u8 = 1;
const GPU_FAILURE_IS_ERROR: u8 = 2;

/// Encodes and decodes [`CoRankMergeExec`] and [`CoRankSortExec`] nodes.
///
/// ```
/// use std::sync::Arc;
/// use arrow::datatypes::{DataType, Field, Schema};
/// use corank::datafusion::{CoRankCodec, CoRankMergeExec};
/// use datafusion::datasource::memory::MemorySourceConfig;
/// use datafusion::execution::TaskContext;
/// use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
/// use datafusion::physical_plan::{expressions::col, ExecutionPlan};
/// use datafusion_proto::bytes::{physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec};
///
/// let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
/// let input = MemorySourceConfig::try_new_exec(&[vec![], vec![]], schema.clone(), None)?;
/// let order = LexOrdering::new([PhysicalSortExpr::new_default(col("k", &schema)?)]).unwrap();
/// let plan: Arc<dyn ExecutionPlan> = Arc::new(CoRankMergeExec::new(order, input));
/// let bytes = physical_plan_to_bytes_with_extension_codec(plan, &CoRankCodec)?;
/// let back = physical_plan_from_bytes_with_extension_codec(&bytes, &TaskContext::default(), &CoRankCodec)?;
/// assert_eq!(back.name(), "CoRankMergeExec");
/// # Ok::<(), datafusion::common::DataFusionError>(())
/// ```
#[derive(Debug, Default)]
pub struct CoRankCodec;

/// Engines and kernels are coded by their position in `Engine::ALL` / `Kernel::ALL`.
fn code<T: PartialEq>(all: &[T], value: T) -> u8 {
    all.iter().position(|v| *v == value).expect("every value is in ALL") as u8
}

/// The fields of a version 1 to 4 encoding (the body of a version 5 one), before the sort
/// expressions, which start at `exprs`.
struct Header {
    fetch: Option<usize>,
    settings: MergeSettings,
    flags: u8,
    exprs: usize,
}

/// Reads a version 1 to 4 encoding's header (a version 5 body with version byte 4).
fn decode_header(buf: &[u8]) -> Result<Header> {
    if buf.len() < HEADER || &buf[..4] != MAGIC {
        return plan_err!("not a CoRankMergeExec encoding ({} bytes)", buf.len());
    }
    let (header, flags, kernel, devices) = match buf[4] {
        1 => (HEADER, 0, 0, Devices::One(0)),
        2 if buf.len() > HEADER => (HEADER + 1, buf[HEADER], 0, Devices::One(0)),
        3 if buf.len() > HEADER + 6 => {
            let device = u32::from_le_bytes(buf[HEADER + 2..HEADER + 6].try_into().expect("4 bytes"));
            (HEADER + 6, buf[HEADER], buf[HEADER + 1], Devices::One(device as usize))
        }
        4 if buf.len() > HEADER + 11 => {
            let value = u64::from_le_bytes(buf[HEADER + 3..HEADER + 11].try_into().expect("8 bytes"));
            let devices = match (buf[HEADER + 2], value) {
                (0, d) => Devices::One(d as usize),
                (1, mask) if mask.count_ones() >= 2 => Devices::Set(mask),
                (2, 0) => Devices::All,
                (tag, value) => return plan_err!("invalid devices (tag {tag}, value {value}) in a CoRankMergeExec encoding"),
            };
            (HEADER + 11, buf[HEADER], buf[HEADER + 1], devices)
        }
        2..=4 => return plan_err!("not a CoRankMergeExec encoding ({} bytes)", buf.len()),
        v => return plan_err!("CoRankMergeExec encoding version {v} is not supported (expected 1 to {VERSION})"),
    };
    let Some(&engine) = Engine::ALL.get(buf[5] as usize) else {
        return plan_err!("unknown engine code {} in a CoRankMergeExec encoding", buf[5]);
    };
    let Some(&kernel) = Kernel::ALL.get(kernel as usize) else {
        return plan_err!("unknown kernel code {kernel} in a CoRankMergeExec encoding");
    };
    let u64_at = |i: usize| u64::from_le_bytes(buf[6 + 8 * i..14 + 8 * i].try_into().expect("8 bytes"));
    let fetch = match u64_at(0) {
        u64::MAX => None,
        f => Some(f as usize),
    };
    let on_gpu_failure = if flags & GPU_FAILURE_IS_ERROR != 0 { OnGpuFailure::Error } else { OnGpuFailure::UseCpu };
    let engine = EngineOptions { engine, kernel, devices, gpu_min_rows: u64_at(2) as usize, on_gpu_failure };
    let settings = MergeSettings { engine, window_rows: u64_at(1) as usize };
    Ok(Header { fetch, settings, flags, exprs: header })
}

impl CoRankCodec {
    /// The sort expressions encoded in `buf`, over `input`'s schema.
    fn decode_ordering(
        &self,
        buf: &[u8],
        input: &Arc<dyn ExecutionPlan>,
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
        node: &str,
    ) -> Result<LexOrdering> {
        let nodes = PhysicalSortExprNodeCollection::decode(buf)
            .map_err(|e| datafusion::common::DataFusionError::Plan(format!("{node} sort expressions: {e}")))?;
        let decode_ctx = PhysicalPlanDecodeContext::new(ctx, self);
        let exprs = parse_physical_sort_exprs(&nodes.physical_sort_expr_nodes, &decode_ctx, &input.schema(), proto_converter)?;
        match LexOrdering::new(exprs) {
            Some(ordering) => Ok(ordering),
            None => plan_err!("{node} encoding has no sort expressions"),
        }
    }
}

/// Writes the version 4 body (after the magic and version, and a version 5 kind byte).
fn encode_body(buf: &mut Vec<u8>, settings: &MergeSettings, fetch: Option<usize>, flags: u8) {
    buf.push(code(&Engine::ALL, settings.engine.engine));
    buf.extend_from_slice(&(fetch.map_or(u64::MAX, |f| f as u64)).to_le_bytes());
    buf.extend_from_slice(&(settings.window_rows as u64).to_le_bytes());
    buf.extend_from_slice(&(settings.engine.gpu_min_rows as u64).to_le_bytes());
    let strict = settings.engine.on_gpu_failure == OnGpuFailure::Error;
    buf.push(flags | if strict { GPU_FAILURE_IS_ERROR } else { 0 });
    buf.push(code(&Kernel::ALL, settings.engine.kernel));
    let (tag, value) = match settings.engine.devices {
        Devices::One(d) => (0u8, d as u64),
        Devices::Set(mask) => (1, mask),
        Devices::All => (2, 0),
    };
    buf.push(tag);
    buf.extend_from_slice(&value.to_le_bytes());
}

impl PhysicalExtensionCodec for CoRankCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Version 5: the kind byte, then a version 4 body (read as one).
        let (kind, v4);
        let buf = if buf.len() > 5 && &buf[..4] == MAGIC && buf[4] == VERSION {
            kind = buf[5];
            v4 = [&MAGIC[..], &[MERGE_VERSION], &buf[6..]].concat();
            &v4[..]
        } else {
            kind = KIND_MERGE;
            buf
        };
        let name = match kind {
            KIND_MERGE => "CoRankMergeExec",
            KIND_SORT => "CoRankSortExec",
            k => return plan_err!("unknown node kind {k} in a corank plan encoding"),
        };
        let Header { fetch, settings, flags, exprs } = decode_header(buf)?;
        let [input] = inputs else {
            return plan_err!("{name} takes one input, the plan gives {}", inputs.len());
        };
        if kind == KIND_SORT {
            let Some(chunk) = buf.get(exprs..exprs + 8) else {
                return plan_err!("not a CoRankSortExec encoding ({} bytes)", buf.len() + 1);
            };
            let chunk_rows = u64::from_le_bytes(chunk.try_into().expect("8 bytes")) as usize;
            let ordering = self.decode_ordering(&buf[exprs + 8..], input, ctx, proto_converter, name)?;
            return Ok(Arc::new(CoRankSortExec::new(ordering, Arc::clone(input)).with_settings(settings).with_chunk_rows(chunk_rows)));
        }
        let ordering = self.decode_ordering(&buf[exprs..], input, ctx, proto_converter, name)?;
        Ok(Arc::new(
            CoRankMergeExec::new(ordering, Arc::clone(input))
                .with_fetch(fetch)
                .with_settings(settings)
                .with_check_sorted(flags & CHECK_SORTED != 0),
        ))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let (expr, tail) = if let Some(merge) = node.downcast_ref::<CoRankMergeExec>() {
            buf.extend_from_slice(MAGIC);
            buf.push(MERGE_VERSION);
            encode_body(buf, merge.settings(), merge.fetch(), if merge.check_sorted() { CHECK_SORTED } else { 0 });
            (merge.expr(), vec![])
        } else if let Some(sort) = node.downcast_ref::<CoRankSortExec>() {
            buf.extend_from_slice(MAGIC);
            buf.push(VERSION);
            buf.push(KIND_SORT);
            encode_body(buf, sort.settings(), None, 0);
            (sort.expr(), (sort.chunk_rows() as u64).to_le_bytes().to_vec())
        } else {
            return plan_err!("CoRankCodec encodes only CoRankMergeExec and CoRankSortExec, not {}", node.name());
        };
        buf.extend_from_slice(&tail);
        let nodes = serialize_physical_sort_exprs(expr.iter().cloned(), self, proto_converter)?;
        PhysicalSortExprNodeCollection { physical_sort_expr_nodes: nodes }
            .encode(buf)
            .map_err(|e| datafusion::common::DataFusionError::Internal(format!("encoding {}: {e}", node.name())))?;
        Ok(())
    }
}
