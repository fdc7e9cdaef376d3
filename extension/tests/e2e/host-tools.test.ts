// End to end through the real `pi` from npm, offline: a cell calls a tool registered by a second
// extension (tests/fixtures/weather-tool.ts) and pi's built-in `read` as `tools.<name>(...)`; the
// execute tool's description lists them with signatures from their schemas; a schema error shows
// the signature and runs nothing; a misspelt name gets the nearest real one; a tool that throws
// raises in the cell; the tool's image reaches the result the agent's model receives.

import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, describe, it } from "node:test";
import { killMarked, PACKAGE_DIR, removeTempDirs } from "../helpers/env.js";
import { PiSandbox, runPi } from "../helpers/pi.js";

/** The second extension, loaded by pi from its TypeScript source. */
const WEATHER_TOOL = join(PACKAGE_DIR, "tests", "fixtures", "weather-tool.ts");

const sandboxes: PiSandbox[] = [];

afterEach(() => {
	for (const box of sandboxes.splice(0)) killMarked(box.mark);
});
after(removeTempDirs);

describe("host tools in pi", () => {
	it("a cell calls another extension's tool and pi's read, with schema errors and a nearest-name suggestion", async () => {
		const box = new PiSandbox();
		sandboxes.push(box);
		writeFileSync(join(box.project, "notes.txt"), "first note\nsecond note\n");
		const weatherLog = join(box.root, "weather.jsonl");
		const code = [
			"from pi_repl_kernel.host_tools import HostToolError",
			"print('value:', tools.weather(city='Oslo', days=2))",
			"print('read:', tools.read(path='notes.txt').splitlines()[0])",
			"for call in (lambda: tools.weather(days=2), lambda: tools.weathr(city='Oslo'),",
			"             lambda: tools.weather(city='Atlantis'), lambda: tools.execute(code='1')):",
			"    try:",
			"        call()",
			"    except HostToolError as e:",
			"        print(type(e).__name__, '|', str(e).replace(chr(10), ' / '))",
		].join("\n");
		box.script([{ call: { code } }, { say: "finished" }]);
		const run = await runPi(box, ["-e", WEATHER_TOOL, "--repl", "--no-session", "--mode", "json"], "go", {
			timeoutMs: 120_000,
			env: { PI_REPL_TEST_WEATHER_LOG: weatherLog },
		});
		assert.equal(run.code, 0, run.stderr);

		const turns = box.records();
		assert.equal(turns.length, 2, JSON.stringify(turns));
		// Only execute reaches the model; its description lists the host tools with signatures.
		assert.deepEqual(turns[0]?.tools, ["execute"]);
		const description = turns[0]?.toolDescriptions.execute ?? "";
		assert.match(description, /- tools\.weather\(city: str, days: int = None\): Get the weather forecast for a city\./);
		assert.match(description, /- tools\.read\(path: str, /);
		assert.doesNotMatch(description, /tools\.execute/);

		const result = turns[1]?.lastToolResult;
		const text = (result?.content ?? []).filter((b) => b.type === "text").map((b) => b.text).join("\n");
		assert.equal(result?.isError, false, text);
		assert.match(text, /value: forecast for Oslo: sunny for 2 day\(s\)/);
		assert.match(text, /read: first note/);
		assert.match(text, /HostToolArgumentsError \| Validation failed for tool "weather":.*city.* \/ The signature: tools\.weather\(city: str, days: int = None\)/);
		assert.match(text, /UnknownHostTool \| pi has no tool named "weathr"\. Did you mean tools\.weather\(city: str, days: int = None\)\?/);
		assert.match(text, /HostToolError \| weather failed: no forecast for sunken cities/);
		assert.match(text, /UnknownHostTool \| execute is this workspace itself, not a host tool\./);
		// The tool's image reached the result the agent's model received.
		assert.ok(
			(result?.content ?? []).some((b) => b.type === "image" && b.mimeType === "image/png"),
			JSON.stringify(result?.content.map((b) => b.type)),
		);
		// The schema error ran nothing: the tool ran for Oslo and Atlantis only.
		assert.ok(existsSync(weatherLog));
		const ran = readFileSync(weatherLog, "utf8").trim().split("\n").map((line) => JSON.parse(line));
		assert.deepEqual(ran, [{ city: "Oslo", days: 2 }, { city: "Atlantis" }]);
	});
});
