// A scripted stand-in for the Anthropic Messages API, on 127.0.0.1, for the real Claude Code.
//
// This is the one mock in these tests: the model. Claude Code itself, its MCP client and pi-repl
// are real. The model follows a script: while the conversation holds fewer tool results than the
// script has calls, it answers with the next call of the MCP tool; then it answers with text. A
// call may be a function of the tool results so far (a model that reads a cell number from a
// result and uses it in its next call; helpers/script.mjs).
// Every request that offers the tool is recorded with the last tool result it carried, which is
// exactly what a real model would read. When the tool is deferred (Claude Code's default: MCP
// tools are loaded on demand), the model first loads it with `ToolSearch`. Requests that do not
// offer the tool otherwise (side requests, e.g. a title or a quota probe) get a short text answer
// and are counted, not recorded.
//
// Owns: `POST /v1/messages` (streamed as server-sent events, or plain JSON when the request
// does not ask for a stream), `POST /v1/messages/count_tokens`, and a 404 for anything else
// (logged in `unhandled`, so a test can show what the client asked for).

import { createServer } from "node:http";
import { nextCall } from "./script.mjs";

/**
 * Starts the fake API. `script.calls` is a list of tool inputs (`{ code, timeout_ms? }`,
 * `{ cell, wait_ms? }`, …) or of functions from the results so far to one (script.mjs);
 * `script.tool` the tool name the model calls; `script.finalText` the closing answer.
 * Resolves to `{ baseUrl, records, toolSearches, sideRequests, unhandled, close() }`.
 */
export async function startFakeAnthropic(script) {
	const log = { records: [], toolSearches: [], sideRequests: [] };
	const unhandled = [];
	const server = createServer(async (req, res) => {
		const body = await readBody(req);
		const path = (req.url ?? "").split("?")[0];
		if (req.method === "POST" && path === "/v1/messages/count_tokens") {
			return sendJson(res, 200, { input_tokens: 1000 });
		}
		if (req.method === "POST" && path === "/v1/messages") {
			let request;
			try {
				request = JSON.parse(body);
			} catch {
				return sendJson(res, 400, { type: "error", error: { type: "invalid_request_error", message: "not JSON" } });
			}
			const reply = answer(request, script, log);
			return request.stream ? sendStream(res, request.model, reply) : sendJson(res, 200, message(request.model, reply));
		}
		unhandled.push(`${req.method} ${req.url}`);
		sendJson(res, 404, { type: "error", error: { type: "not_found_error", message: "not here" } });
	});
	await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
	const { port } = server.address();
	return {
		baseUrl: `http://127.0.0.1:${port}`,
		...log,
		unhandled,
		close: () =>
			new Promise((resolve) => {
				server.closeAllConnections();
				server.close(() => resolve());
			}),
	};
}

/**
 * The scripted reply to one request: `{ toolUse }` or `{ text }`. When Claude Code defers MCP
 * tools (its default), the tool is not offered until the model loads it: the model then calls
 * `ToolSearch` with `select:<tool>` first, as a real model would.
 */
function answer(request, script, { records, toolSearches, sideRequests }) {
	const names = (request.tools ?? []).map((tool) => tool.name);
	const messages = request.messages ?? [];
	if (!names.includes(script.tool)) {
		if (names.includes("ToolSearch") && toolResults(messages, "ToolSearch").length === 0) {
			const query = `select:${script.tool}`;
			toolSearches.push(query);
			return { toolUse: { id: "toolu_search_0001", name: "ToolSearch", input: { query, max_results: 1 } } };
		}
		sideRequests.push({ system: systemText(request.system).slice(0, 200), tools: names });
		return { text: "ok" };
	}
	const results = toolResults(messages, script.tool);
	const last = results.at(-1) ?? null;
	const next = nextCall(script.calls, results);
	records.push({ request: records.length + 1, toolResultCount: results.length, lastToolResult: last, call: next ?? null });
	if (next === undefined) return { text: script.finalText ?? "done" };
	return { toolUse: { id: `toolu_${String(results.length + 1).padStart(4, "0")}`, name: script.tool, input: next } };
}

/** The results of calls of `tool` in the conversation, in order, as `{ isError, content: [...] }`. */
function toolResults(messages, tool) {
	const calledTool = new Map();
	const found = [];
	for (const msg of messages) {
		if (!Array.isArray(msg.content)) continue;
		for (const block of msg.content) {
			if (msg.role === "assistant" && block.type === "tool_use") calledTool.set(block.id, block.name);
			if (msg.role !== "user" || block.type !== "tool_result" || calledTool.get(block.tool_use_id) !== tool) continue;
			const content = typeof block.content === "string" ? [{ type: "text", text: block.content }] : (block.content ?? []).map(part);
			found.push({ toolUseId: block.tool_use_id, isError: block.is_error === true, content });
		}
	}
	return found;
}

/** A content block as the tests read it: text as is, a base64 image as `{ type, mimeType, data }`. */
function part(block) {
	if (block.type === "image" && block.source?.type === "base64") {
		return { type: "image", mimeType: block.source.media_type, data: block.source.data };
	}
	return block;
}

function systemText(system) {
	if (typeof system === "string") return system;
	if (Array.isArray(system)) return system.map((block) => block.text ?? "").join("\n");
	return "";
}

function message(model, reply) {
	const content = reply.toolUse
		? [{ type: "tool_use", id: reply.toolUse.id, name: reply.toolUse.name, input: reply.toolUse.input }]
		: [{ type: "text", text: reply.text }];
	return {
		id: `msg_${Date.now()}`,
		type: "message",
		role: "assistant",
		model,
		content,
		stop_reason: reply.toolUse ? "tool_use" : "end_turn",
		stop_sequence: null,
		usage: { input_tokens: 10, output_tokens: 5 },
	};
}

function sendStream(res, model, reply) {
	res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
	const event = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
	const full = message(model, reply);
	event("message_start", { message: { ...full, content: [], stop_reason: null, usage: { input_tokens: 10, output_tokens: 1 } } });
	if (reply.toolUse) {
		const { id, name, input } = reply.toolUse;
		event("content_block_start", { index: 0, content_block: { type: "tool_use", id, name, input: {} } });
		event("content_block_delta", { index: 0, delta: { type: "input_json_delta", partial_json: JSON.stringify(input) } });
	} else {
		event("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
		event("content_block_delta", { index: 0, delta: { type: "text_delta", text: reply.text } });
	}
	event("content_block_stop", { index: 0 });
	event("message_delta", { delta: { stop_reason: full.stop_reason, stop_sequence: null }, usage: { output_tokens: 5 } });
	event("message_stop", {});
	res.end();
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
