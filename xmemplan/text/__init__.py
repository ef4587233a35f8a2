"""Text traces: offline tokenizers, prompt rendering, and a per-message token cache.

- `tokenizer`: built-in tokenizers whose vocabulary ships inside a registry package (nothing
  is downloaded at run time), or any Hugging Face `tokenizer.json` given by path;
- `render`: turns Anthropic / OpenAI request pieces (system, tools, messages) into
  `(role, text)` chunks as a serving engine would see them, minus per-request noise;
- `encoder`: tokenizes each distinct chunk once (xxhash content key) and concatenates the
  cached token arrays into prompts.
"""
