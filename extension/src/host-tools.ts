// Host tools in cells: a cell's `tools.<name>(**kwargs)` runs a tool of this pi session.
//
// pi-repl passes the cell's call to this extension as the custom MCP request
// `pi-repl/hostTools/call` (`{name, arguments}`; `pi-repl/hostTools/list` for the listing), sent
// only because the client declares the experimental capability `pi-repl/host-tools` (client.ts).
// Here the call is checked and run:
// - the name must be a host tool: every tool of the session other than `execute` that is active
//   (or was when the session started, before the extension collapsed pi's tools to `execute`);
//   an unknown name is answered with the nearest real one;
// - the arguments are checked against the tool's own schema with pi-ai's `validateToolArguments`
//   (the validator pi applies to the model's own tool calls), and a name the schema does not
//   have is refused; a failure names the problem and shows the signature;
// - the tool runs with the session's context; a throw comes back as `HostToolError`;
// - its text blocks, joined, are the value; its images go back as `{data, mimeType}` and the
//   kernel shows them in the cell, so they reach the cell's tool result.
// The execute tool's description lists the same tools with signatures rendered from the same
// schemas (`describeHostTools`).
//
// Owns: the list, the signatures, validation, running one tool, the answer's shape. Does not own:
// the channel (client.ts, pi-repl's `src/host_tools/`), finding a tool's definition in pi
// (`HostToolSource`, built in index.ts).

import { validateToolArguments } from "@mariozechner/pi-ai";

/** A tool as pi lists it (`pi.getAllTools()`). */
export interface HostToolInfo {
	name: string;
	description?: string;
	parameters?: unknown;
}

/** A tool's result as pi's tools return it. */
export interface HostToolResult {
	content?: Array<{ type: string; text?: string; data?: string; mimeType?: string }>;
}

/** Runs a tool: pi's `ToolDefinition.execute` with the session's context bound. */
export type HostToolExecute = (toolCallId: string, args: Record<string, unknown>, signal: AbortSignal) => Promise<HostToolResult>;

/** Where the tools come from (pi in index.ts; a table in tests). */
export interface HostToolSource {
	/** The host tools now (execute already left out or not: it is left out here). */
	tools(): HostToolInfo[];
	/** How to run `name`, or undefined when pi cannot give its definition. */
	executor(name: string): HostToolExecute | undefined;
}

/** What the kernel reads (pi-repl passes it through; `ok: false` raises `error`'s class). */
export type HostToolAnswer =
	| { ok: true; text: string; images: Array<{ data: string; mimeType: string }> }
	| { ok: false; error: HostToolErrorKind; message: string };

export type HostToolErrorKind = "HostToolError" | "HostToolArgumentsError" | "UnknownHostTool" | "HostToolCancelled";

/** One line of the listing. */
export interface HostToolListing {
	name: string;
	signature: string;
	summary: string;
}

const EXECUTE = "execute";
/** Longest summary shown for a tool in the listing. */
const SUMMARY_CHARS = 120;
let callCounter = 0;

/** The listing: each host tool with its Python signature and the first sentence of its description. */
export function listHostTools(tools: HostToolInfo[]): HostToolListing[] {
	return tools
		.filter((tool) => tool.name !== EXECUTE)
		.map((tool) => ({ name: tool.name, signature: signatureOf(tool.parameters), summary: summaryOf(tool.description) }));
}

/** The paragraph appended to the execute tool's description (empty when there is no host tool). */
export function describeHostTools(tools: HostToolInfo[]): string {
	const listed = listHostTools(tools);
	if (listed.length === 0) return "";
	const lines = listed.map((tool) => `- tools.${tool.name}${tool.signature}${tool.summary ? `: ${tool.summary}` : ""}`);
	return [
		"Host tools: pi's own tools, callable from a cell with keyword arguments (checked against the tool's schema); the value is the tool's text, its images are shown in the cell:",
		...lines,
	].join("\n");
}

/** A JSON schema's properties as a Python signature: `(path: str, limit: int = None)`. */
export function signatureOf(schema: unknown): string {
	const object = asRecord(schema);
	const properties = asRecord(object?.properties);
	if (!properties) return "()";
	const required = new Set(Array.isArray(object?.required) ? (object.required as unknown[]).filter((n): n is string => typeof n === "string") : []);
	const names = Object.keys(properties);
	const ordered = [...names.filter((n) => required.has(n)), ...names.filter((n) => !required.has(n))];
	const parts = ordered.map((name) => {
		const property = asRecord(properties[name]);
		const type = pythonType(property);
		if (required.has(name)) return `${name}: ${type}`;
		const fallback = property && "default" in property ? pythonValue(property.default) : "None";
		return `${name}: ${type} = ${fallback}`;
	});
	return `(${parts.join(", ")})`;
}

/** The Python spelling of a JSON schema's type. */
function pythonType(schema: Record<string, unknown> | undefined): string {
	if (!schema) return "object";
	if (Array.isArray(schema.enum)) return `Literal[${schema.enum.map(pythonValue).join(", ")}]`;
	if ("const" in schema) return `Literal[${pythonValue(schema.const)}]`;
	const union = (schema.anyOf ?? schema.oneOf) as unknown;
	if (Array.isArray(union)) return union.map((s) => pythonType(asRecord(s))).join(" | ");
	const types = Array.isArray(schema.type) ? schema.type : [schema.type];
	const named = types.map((type) => {
		switch (type) {
			case "string":
				return "str";
			case "integer":
				return "int";
			case "number":
				return "float";
			case "boolean":
				return "bool";
			case "null":
				return "None";
			case "array": {
				const items = asRecord(schema.items);
				return items ? `list[${pythonType(items)}]` : "list";
			}
			case "object":
				return "dict";
			default:
				return "object";
		}
	});
	return named.join(" | ");
}

function pythonValue(value: unknown): string {
	if (value === null || value === undefined) return "None";
	if (value === true) return "True";
	if (value === false) return "False";
	if (typeof value === "string") return `'${value.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
	return JSON.stringify(value);
}

function summaryOf(description: string | undefined): string {
	const text = (description ?? "").trim().split(/\n\s*\n/)[0]?.replace(/\s+/g, " ") ?? "";
	const sentence = text.match(/^.*?[.!?](\s|$)/)?.[0]?.trim() ?? text;
	return sentence.length > SUMMARY_CHARS ? `${sentence.slice(0, SUMMARY_CHARS - 1)}…` : sentence;
}

/** The known name closest to `name` (edit distance, a shared prefix breaking ties), if any is close. */
export function nearestName(name: string, known: string[]): string | undefined {
	let best: { name: string; distance: number } | undefined;
	for (const candidate of known) {
		const distance = editDistance(name.toLowerCase(), candidate.toLowerCase());
		if (!best || distance < best.distance) best = { name: candidate, distance };
	}
	if (!best) return undefined;
	// Close enough to be a typo: at most a third of the longer name differs (at least 2 edits).
	const allowed = Math.max(2, Math.ceil(Math.max(name.length, best.name.length) / 3));
	return best.distance <= allowed ? best.name : undefined;
}

function editDistance(a: string, b: string): number {
	let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
	for (let i = 1; i <= a.length; i++) {
		const current = [i];
		for (let j = 1; j <= b.length; j++) {
			const cost = a[i - 1] === b[j - 1] ? 0 : 1;
			current[j] = Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, (previous[j - 1] ?? 0) + cost);
		}
		previous = current;
	}
	return previous[b.length] ?? 0;
}

/** Checks and runs one call from a cell. Never throws: every failure is an answer. */
export async function callHostTool(params: unknown, source: HostToolSource, signal: AbortSignal): Promise<HostToolAnswer> {
	const given = asRecord(params);
	const name = given?.name;
	if (typeof name !== "string" || name === "") return failure("HostToolError", "the tool call names no tool");
	const tools = source.tools().filter((tool) => tool.name !== EXECUTE);
	const tool = tools.find((candidate) => candidate.name === name);
	if (!tool) {
		const names = tools.map((t) => t.name);
		const nearest = nearestName(name, names);
		const hint = nearest ? ` Did you mean tools.${nearest}${signatureOf(tools.find((t) => t.name === nearest)?.parameters)}?` : "";
		const listing = names.length > 0 ? ` The host tools: ${names.join(", ")}.` : " This pi session has no tool besides execute.";
		const why = name === EXECUTE ? "execute is this workspace itself, not a host tool." : `pi has no tool named ${JSON.stringify(name)}.`;
		return failure("UnknownHostTool", `${why}${hint}${listing}`);
	}
	const signature = `tools.${tool.name}${signatureOf(tool.parameters)}`;
	const args = asRecord(given?.arguments) ?? {};
	const problem = argumentProblem(tool, args);
	if (problem) return failure("HostToolArgumentsError", `${problem}\nThe signature: ${signature}`);
	let checked: Record<string, unknown>;
	try {
		checked = validateToolArguments(tool as never, { type: "toolCall", id: "", name: tool.name, arguments: args } as never) as Record<string, unknown>;
	} catch (error) {
		const message = errorMessage(error).replace(/\n\nReceived arguments:[\s\S]*$/, "");
		return failure("HostToolArgumentsError", `${message}\nThe signature: ${signature}`);
	}
	const execute = source.executor(tool.name);
	if (!execute) return failure("HostToolError", `pi did not give pi-repl a way to run ${tool.name} (its definition was not found)`);
	if (signal.aborted) return failure("HostToolCancelled", "the tool call was cancelled because the cell was interrupted");
	let result: HostToolResult;
	try {
		callCounter += 1;
		result = await execute(`pi-repl-cell-tool-${callCounter}`, checked, signal);
	} catch (error) {
		if (signal.aborted) return failure("HostToolCancelled", "the tool call was cancelled because the cell was interrupted");
		return failure("HostToolError", `${tool.name} failed: ${errorMessage(error)}`);
	}
	const content = Array.isArray(result?.content) ? result.content : [];
	const text = content
		.filter((block) => block.type === "text" && typeof block.text === "string")
		.map((block) => block.text as string)
		.join("\n");
	const images = content
		.filter((block) => block.type === "image" && typeof block.data === "string")
		.map((block) => ({ data: block.data as string, mimeType: block.mimeType ?? "image/png" }));
	return { ok: true, text, images };
}

/** A keyword the schema does not name (when the schema lists its properties and allows no others). */
function argumentProblem(tool: HostToolInfo, args: Record<string, unknown>): string | undefined {
	const schema = asRecord(tool.parameters);
	const properties = asRecord(schema?.properties);
	if (!properties || (schema?.additionalProperties !== undefined && schema.additionalProperties !== false)) return undefined;
	const known = Object.keys(properties);
	for (const key of Object.keys(args)) {
		if (known.includes(key)) continue;
		const nearest = nearestName(key, known);
		return `${tool.name} takes no argument ${JSON.stringify(key)}${nearest ? ` (did you mean ${nearest}=?)` : ""}.`;
	}
	return undefined;
}

function failure(error: HostToolErrorKind, message: string): HostToolAnswer {
	return { ok: false, error, message };
}

function asRecord(value: unknown): Record<string, unknown> | undefined {
	return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

function errorMessage(error: unknown): string {
	return error instanceof Error ? error.message : String(error);
}
