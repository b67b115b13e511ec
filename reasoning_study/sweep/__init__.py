"""The cross-run layer: a sweep file expanded into cells (`spec`), the index of a sweep folder (`index`),
one sweep per cell (`locks`), and the executors that run the cells (`executors`)."""
