// The official `openai` npm client against a running `tandem serve`:
//   node openai_client.mjs BASE_URL API_KEY [EXPERT_PIDS]
// Completions and chat completions, streaming and not (a stream's pieces must
// add up to the non-streaming text, greedy), 8 concurrent streams that must
// each give the same text as their prompt's non-streaming request, and a bad
// request surfacing as the client's APIError with status 400. With
// EXPERT_PIDS (comma-separated expert worker pids): 8 concurrent greedy
// streams during which each of those workers is SIGKILLed in turn must all
// finish with the tokens of an undisturbed run. Prints one JSON summary line;
// exits non-zero on the first mismatch.
import OpenAI from "openai";

const [baseURL, apiKey, expertPids] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: apiKey || "none", maxRetries: 0, timeout: 120000 });

function check(cond, what) {
  if (!cond) {
    console.error("FAILED:", what);
    process.exit(1);
  }
}

const models = await client.models.list();
const model = models.data[0].id;
check(models.data.length === 1 && typeof model === "string", "models.list returns the served model");

const completion = await client.completions.create({ model, prompt: "Hello world", max_tokens: 12, temperature: 0 });
const text = completion.choices[0].text;
check(completion.usage.completion_tokens > 0, "completion usage counts tokens");
let streamed = "";
for await (const chunk of await client.completions.create({ model, prompt: "Hello world", max_tokens: 12, temperature: 0, stream: true }))
  streamed += chunk.choices[0]?.text ?? "";
check(streamed === text, `completion stream ${JSON.stringify(streamed)} == ${JSON.stringify(text)}`);

async function chat(content, stream, maxTokens = 10, onChunk = () => {}) {
  const req = { model, messages: [{ role: "user", content }], max_tokens: maxTokens, temperature: 0 };
  if (!stream) return (await client.chat.completions.create(req)).choices[0].message.content;
  let s = "";
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    s += chunk.choices[0]?.delta?.content ?? "";
    onChunk();
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  check(finish === "length" || finish === "stop", `chat stream ends with a finish reason (${finish})`);
  return s;
}

const prompts = ["hi", "tell me a story", "2+2?", "hello there", "what is MoE?", "abc", "xyz", "one more"];
const expected = [];
for (const p of prompts) expected.push(await chat(p, false));
check((await chat(prompts[0], true)) === expected[0], "chat stream == chat");
const concurrent = await Promise.all(prompts.map((p) => chat(p, true)));
for (let i = 0; i < prompts.length; ++i)
  check(concurrent[i] === expected[i], `concurrent stream ${i}: ${JSON.stringify(concurrent[i])} == ${JSON.stringify(expected[i])}`);

let status = 0;
try {
  await client.completions.create({ model, prompt: "x", max_tokens: 4, temperature: 7 });
} catch (e) {
  status = e.status;
}
check(status === 400, `a bad temperature is a 400 APIError (got ${status})`);

let killed = [];
if (expertPids) {
  // Fault test: the workers die one after the other while 8 streams run.
  const victims = expertPids.split(",").map(Number);
  const long = [];
  for (const p of prompts) long.push(await chat(p, false, 48));
  let chunks = 0;
  const onChunk = () => {
    ++chunks;
    // The first kill once every stream is under way, the next ones spread out.
    const due = 8 + killed.length * 48;
    if (killed.length < victims.length && chunks >= due) {
      process.kill(victims[killed.length], "SIGKILL");
      killed.push(victims[killed.length]);
    }
  };
  const faulted = await Promise.all(prompts.map((p) => chat(p, true, 48, onChunk)));
  check(killed.length === victims.length, `all ${victims.length} workers were killed mid-stream (${killed.length}, ${chunks} chunks)`);
  for (let i = 0; i < prompts.length; ++i)
    check(faulted[i] === long[i], `stream ${i} with worker kills: ${JSON.stringify(faulted[i])} == ${JSON.stringify(long[i])}`);
}

console.log(JSON.stringify({ ok: true, model, completion: text, chats: expected.length, concurrent: concurrent.length, killed }));
