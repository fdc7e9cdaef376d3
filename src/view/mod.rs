//! What a model is shown of a cell: its `Outcome` rendered as an MCP tool result (text in
//! notebook order, images downscaled to a budget, the outcome itself in `_meta`).
//!
//! Owns: `render` (outcome → `CallToolResult`, saved rich outputs) and `images` (PNG/JPEG
//! decoded, downscaled, the original saved). Both front doors that show a model a cell use it:
//! the MCP server (`mcp/`) and a sub-agent's own loop (`cli/agent_loop.rs`), which shows its
//! model the text an MCP client would see. Does not own: fitting a result to one client's limits
//! (`mcp/fit.rs`), nor how a person sees a cell (`cli/printer.rs`, `engine/notebook/`).
//!
//! Invariant: depends only on the engine's vocabulary and the file helpers, never on a front
//! door, so both can use it.

pub mod images;
mod png_shrink;
pub mod render;

pub use images::{DEFAULT_MAX_COUNT, DEFAULT_MAX_SIDE, ImageBudget};
