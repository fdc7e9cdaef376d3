// The `execute` tool's metadata as pi registers it, taken from pi-repl's `tools/list`.
//
// Owns: reading the description, the input schema and the `_meta` prompt snippet and guidelines
// that pi-repl serves (one source of truth, in Rust), and the stand-in metadata used when
// pi-repl could not be started. Does not own: any wording of the manual itself.
//
// Invariants: when pi-repl answered, the model's description, schema, snippet and guidelines are
// pi-repl's, unchanged.

import type { Tool } from "@modelcontextprotocol/sdk/types.js";

export const SNIPPET_META = "pi-repl/promptSnippet";
export const GUIDELINES_META = "pi-repl/promptGuidelines";

/** What pi's `registerTool` needs besides `execute` and the renderers. */
export interface ToolMeta {
	description: string;
	promptSnippet?: string;
	promptGuidelines?: string[];
	/** JSON Schema of the arguments (pi validates plain JSON Schema as well as TypeBox). */
	parameters: Record<string, unknown>;
}

/** The schema used when pi-repl did not answer: the documented `{code, timeout_ms?}`. */
export const FALLBACK_PARAMETERS: Record<string, unknown> = {
	type: "object",
	properties: {
		code: { type: "string", description: "Python code to run in the workspace, like one notebook cell." },
		timeout_ms: { type: "integer", minimum: 1, description: "Abort the cell if it runs longer than this many milliseconds." },
	},
	required: ["code"],
	additionalProperties: false,
};

/** Metadata from the tool pi-repl listed. */
export function metaFromTool(tool: Tool): ToolMeta {
	const meta = (tool._meta ?? {}) as Record<string, unknown>;
	const snippet = meta[SNIPPET_META];
	const guidelines = meta[GUIDELINES_META];
	const result: ToolMeta = {
		description: tool.description ?? "Run Python code in a persistent workspace.",
		parameters: tool.inputSchema as Record<string, unknown>,
	};
	if (typeof snippet === "string" && snippet.trim() !== "") {
		result.promptSnippet = snippet;
	}
	if (Array.isArray(guidelines)) {
		result.promptGuidelines = guidelines.filter((line): line is string => typeof line === "string" && line.trim() !== "");
	}
	return result;
}

/** Metadata while pi-repl is unavailable: the model learns why from the first call's error. */
export function unavailableMeta(reason: string): ToolMeta {
	return {
		description: `Run Python code in a persistent workspace (pi-repl). pi-repl is not available right now; a call returns why and how to fix it:\n${reason}`,
		promptSnippet: "run Python in a persistent workspace (pi-repl; currently unavailable)",
		parameters: FALLBACK_PARAMETERS,
	};
}
