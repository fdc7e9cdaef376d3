// host-tools.ts without pi-repl: signatures from JSON schemas, the listing in the execute tool's
// description, the nearest name, and what a call answers (validated before the tool runs).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { callHostTool, describeHostTools, type HostToolSource, nearestName, signatureOf } from "../../src/host-tools.js";

const schema = {
	type: "object",
	properties: {
		path: { type: "string" },
		limit: { type: "integer", default: 10 },
		mode: { type: "string", enum: ["fast", "slow"] },
		tags: { type: "array", items: { type: "string" } },
		flag: { anyOf: [{ type: "boolean" }, { type: "null" }] },
	},
	required: ["path"],
};

describe("host tools", () => {
	it("renders a schema as a Python signature, required first", () => {
		assert.equal(
			signatureOf(schema),
			"(path: str, limit: int = 10, mode: Literal['fast', 'slow'] = None, tags: list[str] = None, flag: bool | None = None)",
		);
		assert.equal(signatureOf({ type: "object", properties: {} }), "()");
		assert.equal(signatureOf(undefined), "()");
	});

	it("lists every tool but execute, with its first sentence", () => {
		const text = describeHostTools([
			{ name: "execute", description: "This workspace.", parameters: {} },
			{ name: "search", description: "Search the web. Returns ten results.\n\nMore.", parameters: { type: "object", properties: { q: { type: "string" } }, required: ["q"] } },
		]);
		assert.match(text, /^Host tools: /);
		assert.match(text, /\n- tools\.search\(q: str\): Search the web\.$/);
		assert.doesNotMatch(text, /execute\(/);
		assert.equal(describeHostTools([{ name: "execute" }]), "");
	});

	it("suggests only a near name", () => {
		assert.equal(nearestName("wether", ["weather", "read"]), "weather");
		assert.equal(nearestName("READ", ["weather", "read"]), "read");
		assert.equal(nearestName("completely_different", ["weather", "read"]), undefined);
	});

	it("checks the arguments before the tool runs, and turns a throw into HostToolError", async () => {
		const ran: unknown[] = [];
		const source: HostToolSource = {
			tools: () => [{ name: "grab", description: "Grab.", parameters: schema }],
			executor: () => async (_id, args) => {
				ran.push(args);
				if (args.path === "boom") throw new Error("it broke");
				return { content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] };
			},
		};
		const signal = new AbortController().signal;
		assert.deepEqual(await callHostTool({ name: "grab", arguments: { path: "x" } }, source, signal), { ok: true, text: "a\nb", images: [] });
		const missing = await callHostTool({ name: "grab", arguments: {} }, source, signal);
		assert.equal(missing.ok, false);
		assert.match(missing.ok ? "" : missing.message, /path[\s\S]*The signature: tools\.grab\(path: str,/);
		const extra = await callHostTool({ name: "grab", arguments: { path: "x", limt: 3 } }, source, signal);
		assert.equal(extra.ok ? "" : extra.message.split("\n")[0], 'grab takes no argument "limt" (did you mean limit=?).');
		const thrown = await callHostTool({ name: "grab", arguments: { path: "boom" } }, source, signal);
		assert.deepEqual(thrown, { ok: false, error: "HostToolError", message: "grab failed: it broke" });
		assert.deepEqual(ran, [{ path: "x" }, { path: "boom" }]);
	});
});
