// A cell's `tools.<name>(...)` through the real pi-repl and a real kernel, answered by the
// extension's client and host-tools.ts (with a table of tools standing in for pi's: pi itself is
// in e2e/host-tools.test.ts). Proves: the value is the tool's text and its images reach the
// call's result; arguments are checked against the schema before the tool runs (the error shows
// the signature, and the tool never ran); an unknown name suggests the nearest; a tool that throws
// raises in the cell; print(tools) lists the tools; interrupting the cell aborts the tool's signal.

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, describe, it } from "node:test";
import { resolveBinary } from "../../src/binary.js";
import type { HostToolsAnswerer } from "../../src/client.js";
import { callHostTool, type HostToolExecute, type HostToolInfo, listHostTools } from "../../src/host-tools.js";
import { contentText, mapCallResult } from "../../src/result.js";
import { type ExecuteOutcome, Workspace } from "../../src/workspace.js";
import { killMarked, newMark, removeTempDirs, replBinary, replEnv, tempDir } from "../helpers/env.js";

const marks: string[] = [];
const workspaces: Workspace[] = [];

/** A 1×1 red PNG. */
const PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";

interface Table {
	[name: string]: { info: HostToolInfo; run: HostToolExecute };
}

function answererFor(table: Table): HostToolsAnswerer {
	const source = {
		tools: () => Object.values(table).map((tool) => tool.info),
		executor: (name: string) => table[name]?.run,
	};
	return {
		call: (params, signal) => callHostTool(params, source, signal),
		list: async () => ({ tools: listHostTools(source.tools()) }),
	};
}

function workspace(hostTools?: HostToolsAnswerer): Workspace {
	const mark = newMark();
	marks.push(mark);
	const root = tempDir("host-tools");
	const cwd = join(root, "project");
	mkdirSync(cwd, { recursive: true });
	const env = { ...replEnv(mark, join(root, "home")), PI_REPL_BIN: replBinary() };
	const ws = new Workspace({ resolveBinary: () => resolveBinary({ env, packageDir: root }), plan: {}, cwd, env, hostTools });
	workspaces.push(ws);
	return ws;
}

function result(outcome: ExecuteOutcome) {
	assert.equal(outcome.kind, "result", JSON.stringify(outcome));
	if (outcome.kind !== "result") throw new Error("no result");
	return mapCallResult(outcome.result);
}

const weatherSchema = {
	type: "object",
	properties: {
		city: { type: "string", description: "The city" },
		days: { type: "integer", description: "How many days" },
	},
	required: ["city"],
};

describe("host tools over the real pi-repl", () => {
	afterEach(async () => {
		for (const ws of workspaces.splice(0)) await ws.stop();
		for (const mark of marks.splice(0)) killMarked(mark);
	});
	after(removeTempDirs);

	it("a tool's text is the value, its image reaches the result, bad arguments and unknown names are refused before anything runs", async () => {
		const ran: Array<Record<string, unknown>> = [];
		const ws = workspace(
			answererFor({
				weather: {
					info: { name: "weather", description: "Get the forecast. Slow.", parameters: weatherSchema },
					run: async (_id, args) => {
						ran.push(args);
						return {
							content: [
								{ type: "text", text: `sunny in ${args.city} for ${args.days ?? 1} days` },
								{ type: "image", data: PIXEL, mimeType: "image/png" },
							],
						};
					},
				},
				broken: {
					info: { name: "broken", description: "Always fails.", parameters: { type: "object", properties: {} } },
					run: async () => {
						throw new Error("the service is down");
					},
				},
			}),
		);
		const code = [
			"v = tools.weather(city='Oslo', days=3)",
			"print('value:', v)",
			"from pi_repl_kernel.host_tools import HostToolError, HostToolArgumentsError, UnknownHostTool",
			"for call in (lambda: tools.weather(days=2), lambda: tools.weather(city='Oslo', dayz=2),",
			"             lambda: tools.weather(city='Oslo', days='soon'), lambda: tools.wether(city='x'), lambda: tools.broken()):",
			"    try:",
			"        call()",
			"    except HostToolError as e:",
			"        print(type(e).__name__, '|', str(e).replace(chr(10), ' / '))",
			"print(tools)",
		].join("\n");
		const mapped = result(await ws.execute({ code }));
		const text = contentText(mapped.content);
		assert.match(text, /value: sunny in Oslo for 3 days/);
		assert.equal(mapped.details.images, 1, text);
		assert.ok(
			mapped.content.some((block) => block.type === "image"),
			"the tool's image is in the call's result",
		);
		// Missing required argument: named, with the signature.
		assert.match(text, /HostToolArgumentsError \|.*city.*The signature: tools\.weather\(city: str, days: int = None\)/);
		// A keyword the schema does not have: the nearest one is suggested.
		assert.match(text, /HostToolArgumentsError \| weather takes no argument "dayz" \(did you mean days=\?\)/);
		// A wrong type, per the schema (pi-ai's validator, as for the model's own calls: it converts
		// what it can, "3" to 3, and refuses the rest).
		assert.match(text, /HostToolArgumentsError \| Validation failed for tool "weather":.*days.*integer/);
		assert.match(text, /UnknownHostTool \| pi has no tool named "wether"\. Did you mean tools\.weather\(city: str, days: int = None\)\?/);
		assert.match(text, /HostToolError \| broken failed: the service is down/);
		assert.match(text, /tools\.weather\(city: str, days: int = None\) {2}# Get the forecast\./);
		// Only the valid call ran.
		assert.deepEqual(ran, [{ city: "Oslo", days: 3 }]);
	});

	it("interrupting the cell aborts the running tool (its signal) and the workspace goes on", async () => {
		let aborted = 0;
		let started: () => void = () => undefined;
		const running = new Promise<void>((resolveRunning) => {
			started = resolveRunning;
		});
		const ws = workspace(
			answererFor({
				wait: {
					info: { name: "wait", description: "Waits until aborted.", parameters: { type: "object", properties: {} } },
					run: (_id, _args, signal) =>
						new Promise((_, reject) => {
							started();
							signal.addEventListener("abort", () => {
								aborted++;
								reject(new Error("aborted"));
							});
						}),
				},
			}),
		);
		const controller = new AbortController();
		const call = ws.execute({ code: "tools.wait()" }, { signal: controller.signal });
		await running;
		controller.abort();
		const outcome = await call;
		assert.equal(outcome.kind, "cancelled");
		const next = result(await ws.execute({ code: "print('still here')" }));
		assert.match(contentText(next.content), /still here/);
		assert.equal(aborted, 1);
	});

	it("without a host that runs tools, a call says host tools exist only under pi", async () => {
		const ws = workspace();
		const code = "try:\n    tools.read(path='x')\nexcept Exception as e:\n    print(type(e).__name__, e)";
		const text = contentText(result(await ws.execute({ code })).content);
		assert.match(text, /HostToolUnavailable host tools \(tools\.<name>\) exist only under pi/);
	});
});
