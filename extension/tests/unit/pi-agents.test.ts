// The command line of a sub-agent started as a pi process: this pi (Node, its flags, the CLI,
// its `-e` extensions), `--repl` in JSON mode without a session file, the model, then the task.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CHILD_INSTRUCTIONS, childArgv, extensionFlags } from "../../src/pi-agents.js";

describe("pi sub-agents", () => {
	it("keeps pi's own -e/--extension flags and nothing else", () => {
		assert.deepEqual(extensionFlags(["-e", "/ext/a", "--repl", "--extension", "/ext/b", "--extension=/ext/c", "-p", "hi", "-e"]), [
			"-e",
			"/ext/a",
			"--extension",
			"/ext/b",
			"--extension=/ext/c",
		]);
	});

	it("runs this pi on the task with the model, flags before the prompt", () => {
		const argv = childArgv(
			"Find the slow endpoints.",
			{ provider: "anthropic", id: "claude-x" },
			{ execPath: "/usr/bin/node", execArgv: ["--no-warnings"], argv: ["/usr/bin/node", "/lib/pi/cli.js", "-e", "/ext/repl", "--repl", "--model", "other", "go"] },
		);
		assert.deepEqual(argv.slice(0, -1), [
			"/usr/bin/node",
			"--no-warnings",
			"/lib/pi/cli.js",
			"-e",
			"/ext/repl",
			"--repl",
			"--mode",
			"json",
			"--no-session",
			"--provider",
			"anthropic",
			"--model",
			"claude-x",
		]);
		assert.equal(argv.at(-1), `${CHILD_INSTRUCTIONS}\n\n# Task\nFind the slow endpoints.`);
		assert.throws(() => childArgv("t", { provider: "p", id: "i" }, { execPath: "node", execArgv: [], argv: ["node"] }), /command line is unknown/);
	});
});
