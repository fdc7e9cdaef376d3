// A scripted stand-in for the OpenAI Responses API, on 127.0.0.1, for the real Codex CLI.
//
// This is the one mock in these tests: the model. Codex itself, its MCP client and pi-repl are
// real. The model follows a script: while the conversation holds fewer tool outputs than the
// script has calls, it answers with the next call of the MCP tool; then it answers with text. A
// call may be a function of the tool outputs so far (helpers/script.mjs).
// Every request that offers the tool is recorded with the last tool output it carried, which is
// exactly what a real model would read. Requests that do not offer the tool get a short text
// answer and are counted, not recorded.
//
// Owns: `POST /v1/responses` (server-sent events), `GET /v1/models` (one model), and a 404 for
// anything else (logged in `unhandled`, so a test can show what the client asked for).

import { createServer } from "node:http";
import { nextCall } from "./script.mjs";

/**
 * Starts the fake API. `script.calls` is a list of tool inputs, or of functions from the tool
 * outputs so far to one (script.mjs); `script.tool` the
 * name Codex gives the MCP tool (`namespace.function` for a function inside a namespace tool,
 * as `toolNames` lists them); `script.finalText` the closing answer.
 * Resolves to `{ baseUrl, records, sideRequests, unhandled, close() }`.
 */
export async function startFakeOpenAI(script) {
	const records = [];
	const sideRequests = [];
	const unhandled = [];
	const server = createServer(async (req, res) => {
		const body = await readBody(req);
		const path = (req.url ?? "").split("?")[0];
		if (req.method === "GET" && path === "/v1/models") {
			return sendJson(res, 200, { object: "list", data: [{ id: "scripted-1", object: "model", owned_by: "test" }] });
		}
		if (req.method === "POST" && path === "/v1/responses") {
			let request;
			try {
				request = JSON.parse(body);
			} catch {
				return sendJson(res, 400, { error: { message: "not JSON", type: "invalid_request_error" } });
			}
			return sendStream(res, request.model, answer(request, script, records, sideRequests));
		}
		unhandled.push(`${req.method} ${req.url}`);
		sendJson(res, 404, { error: { message: "not here", type: "not_found" } });
	});
	await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
	const { port } = server.address();
	return {
		baseUrl: `http://127.0.0.1:${port}/v1`,
		records,
		sideRequests,
		unhandled,
		close: () =>
			new Promise((resolve) => {
				server.closeAllConnections();
				server.close(() => resolve());
			}),
	};
}

/** Names of the function tools a request offers (namespaced tools flattened as `ns.name`). */
export function toolNames(request) {
	const names = [];
	for (const tool of request.tools ?? []) {
		if (tool.name) names.push(tool.name);
		for (const inner of tool.tools ?? []) names.push(`${tool.name}.${inner.name}`);
	}
	return names;
}

/** The scripted reply to one request: `{ call }` or `{ text }`. */
function answer(request, script, records, sideRequests) {
	const names = toolNames(request);
	if (!names.includes(script.tool)) {
		sideRequests.push({ tools: names });
		return { text: "ok" };
	}
	const outputs = toolOutputs(request.input ?? []);
	const next = nextCall(script.calls, outputs);
	records.push({ request: records.length + 1, toolResultCount: outputs.length, lastToolResult: outputs.at(-1) ?? null, call: next ?? null });
	if (next === undefined) return { text: script.finalText ?? "done" };
	return { call: { callId: `call_${String(outputs.length + 1).padStart(4, "0")}`, name: script.tool, arguments: JSON.stringify(next) } };
}

/**
 * Every tool output in the conversation, in order, as `{ callId, content: [...] }` where content
 * holds `{ type: "text", text }` and `{ type: "image", data, mimeType }` (from a data URL).
 */
function toolOutputs(input) {
	const found = [];
	for (const item of input) {
		if (item.type !== "function_call_output" && item.type !== "custom_tool_call_output" && item.type !== "mcp_tool_call_output") continue;
		found.push({ callId: item.call_id, raw: item, content: normalise(item.output) });
	}
	return found;
}

function normalise(output) {
	if (typeof output === "string") return [{ type: "text", text: output }];
	if (Array.isArray(output)) return output.map(part);
	if (output && typeof output === "object") {
		if (typeof output.content === "string") return [{ type: "text", text: output.content }];
		if (Array.isArray(output.content)) return output.content.map(part);
	}
	return [{ type: "unknown", value: output }];
}

function part(item) {
	if (item.type === "input_text" || item.type === "output_text" || item.type === "text") return { type: "text", text: item.text };
	if (item.type === "input_image") {
		const match = /^data:([^;]+);base64,(.*)$/s.exec(item.image_url ?? "");
		return match ? { type: "image", mimeType: match[1], data: match[2] } : { type: "image", url: item.image_url };
	}
	return { type: "unknown", value: item };
}

function sendStream(res, model, reply) {
	res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
	const id = `resp_${Date.now()}`;
	let sequence = 0;
	const event = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`);
	event("response.created", { response: { id, object: "response", model, status: "in_progress", output: [] } });
	const item = reply.call
		? { type: "function_call", id: `fc_${id}`, call_id: reply.call.callId, ...functionName(reply.call.name), arguments: reply.call.arguments, status: "completed" }
		: { type: "message", id: `msg_${id}`, role: "assistant", status: "completed", content: [{ type: "output_text", text: reply.text, annotations: [] }] };
	event("response.output_item.added", { output_index: 0, item: { ...item, status: "in_progress" } });
	if (!reply.call) event("response.output_text.delta", { output_index: 0, content_index: 0, item_id: item.id, delta: reply.text });
	event("response.output_item.done", { output_index: 0, item });
	event("response.completed", {
		response: {
			id,
			object: "response",
			model,
			status: "completed",
			output: [item],
			usage: { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 },
		},
	});
	res.end();
}

/** `ns.name` (a tool inside a namespace tool) as the call's `namespace` and `name`. */
function functionName(tool) {
	const dot = tool.indexOf(".");
	return dot === -1 ? { name: tool } : { namespace: tool.slice(0, dot), name: tool.slice(dot + 1) };
}

function sendJson(res, status, value) {
	res.writeHead(status, { "content-type": "application/json" });
	res.end(JSON.stringify(value));
}

function readBody(req) {
	return new Promise((resolve, reject) => {
		const chunks = [];
		req.on("data", (chunk) => chunks.push(chunk));
		req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
		req.on("error", reject);
	});
}
