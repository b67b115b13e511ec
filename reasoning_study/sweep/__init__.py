"""The cross-run layer: a sweep file expanded into cells (`spec`), the index of a sweep folder (`index`),
one sweep per cell (`locks`), the executors that run the cells (`executors`), and a grid rehearsed on CPU with
stand-in models (`rehearsal`)."""
