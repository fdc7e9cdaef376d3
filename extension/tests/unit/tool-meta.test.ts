// The tool pi registers is the one pi-repl lists: description, schema, snippet, guidelines.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { FALLBACK_PARAMETERS, metaFromTool, unavailableMeta } from "../../src/tool-meta.js";

const TOOL: Tool = {
	name: "execute",
	description: "Run Python code in a persistent workspace.",
	inputSchema: { type: "object", properties: { code: { type: "string" } }, required: ["code"] },
	_meta: {
		"pi-repl/promptSnippet": "run Python in a persistent workspace",
		"pi-repl/promptGuidelines": ["Keep state in variables.", "", 7, "After a <repl_engine_reset> notice, check."],
	},
};

describe("tool metadata", () => {
	it("takes description and schema from tools/list unchanged", () => {
		const meta = metaFromTool(TOOL);
		assert.equal(meta.description, TOOL.description);
		assert.deepEqual(meta.parameters, TOOL.inputSchema);
	});

	it("takes the snippet unchanged (pi prints `- execute: ` before it)", () => {
		assert.equal(metaFromTool(TOOL).promptSnippet, "run Python in a persistent workspace");
	});

	it("keeps the guidelines that are non-empty strings, in order", () => {
		assert.deepEqual(metaFromTool(TOOL).promptGuidelines, ["Keep state in variables.", "After a <repl_engine_reset> notice, check."]);
	});

	it("has no snippet or guidelines when pi-repl sends none", () => {
		const meta = metaFromTool({ ...TOOL, _meta: undefined });
		assert.equal(meta.promptSnippet, undefined);
		assert.equal(meta.promptGuidelines, undefined);
	});

	it("while unavailable, says why in the description and accepts the documented arguments", () => {
		const meta = unavailableMeta("pi-repl is not installed");
		assert.match(meta.description, /not available.*\npi-repl is not installed/s);
		assert.deepEqual(meta.parameters, FALLBACK_PARAMETERS);
		assert.deepEqual((FALLBACK_PARAMETERS as { required: string[] }).required, ["code"]);
	});
});
