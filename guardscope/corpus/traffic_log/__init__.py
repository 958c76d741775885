"""A traffic log (format 5): the corpus a traffic recorder writes, one Parquet row per signature per
flush. Bottom up: ``parquet`` (a flush's rows as Parquet: the schema, a row's layout, read back a
column at a time, each call in its place); written by ``window`` (the rows of the flush being
recorded, each call's index kept), ``files`` (a window file per flush, folded into one past a size
or an age) and ``tail`` (those files, and the manifest after them, written on a thread of their own
in flush order); read by ``columns`` (``RecordColumns``: the rows of one flat, tensors-only call
template as numpy arrays, for a replay that checks them over columns) and ``records`` (a log shard
read as signature records, checked a column at a time). The writer and reader above use them."""
