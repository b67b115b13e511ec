"""reasoning_study: how reasoning LLMs fail, two papers reproduced as one library.

The map, bottom layer first (dependencies point down; no study imports another; `nbs/index.ipynb` is the front page):

- run plumbing: `runs` (paths, redaction), `config` (typed study configs), `provenance` (`run.json`)
- tasks: `tasks.core`, `tasks.timetabling`, `tasks.subsetsum`, `tasks.musobench`, `tasks.qa`, `tasks.noveltybench`,
  `tasks.traces` (traces you already have: lm-eval samples, inspect_ai logs, saved chat completions or any table, read
  into one record; 20 real DeepSeek-R1-Distill-Llama-8B traces on MATH shipped with the package)
- backends: `backends.request` (what is asked and answered), `backends.contract` (the protocol, capabilities),
  `backends.presets` (the papers' models, their providers' rules, the backend kinds, `load_backend`),
  `backends.transformers`, `backends.vllm`, `backends.openai`, `backends.weights`, `backends.lifecycle` (when a hosted
  model's provider retires it: LiteLLM's model map or the preset's own date, and what to use instead),
  `backends.server`, `backends.plan` (a study's roles -> engines that fit together -> backends loaded on first use)
- `store` (every generation, keyed and resumable); prompts: `prompts.musobench`, `prompts.overthinking`,
  `prompts.noveltybench`, `prompts.releases` (each model release's own format); probing: `probing.trace`,
  `probing.answers`, `probing.prober`, `probing.judge`
- metrics: `metrics.intervals` (cluster-bootstrap intervals and paired comparisons, used by every study),
  `metrics.musobench`, `metrics.overthinking`, `metrics.noveltybench`, `metrics.stopping`, `metrics.attention`,
  `metrics.stated` (the stated-answer lens: the answer each prefix has already stated, no model; solution rounds and
  outcome efficiency; against a measured continuation-accuracy curve and against the forced-answer probe);
  figures: `figures.core`, `figures.sections`, `figures.musobench`, `figures.overthinking`, `figures.attention`,
  `figures.stopping`, `figures.traces` (stated-answer strips under the measured continuation-accuracy curve)
- studies: `studies.registry` (the contract and the list: the only door of the layers above), `studies.runner` (one
  run and its `run.json`), `studies.samples` (the browser's record); each study a package whose `study` module is its
  face (the contract): `studies.musobench` (`build`, `replies`, `protocol`, `scoring`, `noveltybench`, `report`,
  `config`, `run`, `samples`, `study`), `studies.overthinking` (`config`, `run`, `report`, `score`, `samples`,
  `study`), `studies.attention` (`recording`, `study`), `studies.traces` (traces you already have, no model needed:
  `config`, `run` (import, every record left out listed; the stated-answer lens; with a prober the forced-answer probe
  at the same cut), `report` (the "Traces you already have" section), `samples`, `study`)
- across runs: `sweep.spec`, `sweep.index`, `sweep.locks`, `sweep.executors`, `sweep.preflight` (one one-token request
  per model server and one hub question per dataset, before a grid runs), `sweep.bill` (a grid's requests, tokens,
  dollars and GPU-hours before it runs), `sweep.rehearsal` (a grid on CPU with stand-ins), `report`, `browser` (every sample of the runs, readable offline), `gpu_check`, `cli`
"""
__version__ = "0.1.0"
