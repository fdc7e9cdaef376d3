// Running one of this pi session's tools on behalf of a cell (host-tools.ts decides whether and
// with what arguments).
//
// pi's extension API lists every tool with its schema (`pi.getAllTools()`) but gives an extension
// no way to run another one. So:
// - a tool an extension registered is run through its definition, which pi's extension runner
//   holds (`ExtensionRunner.getToolDefinition`, a public method of an exported class). This module
//   learns which runner made a context by wrapping `ExtensionRunner.prototype.createContext` once
//   (every context pi hands an extension comes from it) and remembering the runner of each context;
// - a built-in tool (read, bash, edit, write, grep, find, ls) that no extension overrides is a
//   fresh definition from pi's own exported factories, for the session's working directory.
// The tool runs with the context of the execute call whose cell called it, as pi would pass it.
// This reaches past pi's documented extension API (the runner's method is public, its use here is
// not documented); the e2e test `e2e/host-tools.test.ts` runs it against the pinned pi.

import {
	createBashToolDefinition,
	createEditToolDefinition,
	createFindToolDefinition,
	createGrepToolDefinition,
	createLsToolDefinition,
	createReadToolDefinition,
	createWriteToolDefinition,
	type ExtensionContext,
	ExtensionRunner,
	type ToolDefinition,
} from "@mariozechner/pi-coding-agent";
import type { HostToolExecute } from "./host-tools.js";

/** The runner of each context pi created. */
const runners = new WeakMap<object, ExtensionRunner>();
const WRAPPED = Symbol.for("pi-repl.createContext-wrapped");

type Factory = (cwd: string) => ToolDefinition<never, unknown>;
const BUILT_IN: Record<string, Factory> = {
	read: createReadToolDefinition as unknown as Factory,
	bash: createBashToolDefinition as unknown as Factory,
	edit: createEditToolDefinition as unknown as Factory,
	write: createWriteToolDefinition as unknown as Factory,
	grep: createGrepToolDefinition as unknown as Factory,
	find: createFindToolDefinition as unknown as Factory,
	ls: createLsToolDefinition as unknown as Factory,
};

/** Starts remembering which runner made each context (idempotent: one wrap per pi process). */
export function watchRunners(): void {
	const prototype = ExtensionRunner.prototype as unknown as Record<symbol | string, unknown> & {
		createContext: (this: ExtensionRunner) => ExtensionContext;
	};
	if (prototype[WRAPPED]) return;
	const original = prototype.createContext;
	prototype.createContext = function (this: ExtensionRunner) {
		const context = original.call(this);
		runners.set(context, this);
		return context;
	};
	prototype[WRAPPED] = true;
}

watchRunners();

/** How to run the tool `name` with `ctx`, or undefined when pi has no definition of it. */
export function executorOf(name: string, ctx: ExtensionContext): HostToolExecute | undefined {
	const runner = runners.get(ctx);
	let definition = runner?.getToolDefinition(name) as ToolDefinition<never, unknown> | undefined;
	if (!definition) {
		const factory = BUILT_IN[name];
		if (factory) definition = factory(ctx.cwd);
	}
	if (!definition) return undefined;
	const found = definition;
	return (toolCallId, args, signal) => found.execute(toolCallId, args as never, signal, undefined, ctx) as never;
}
