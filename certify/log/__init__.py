"""``spectr-gbv certify log FILE``: certify recorded traffic, one ``{"request", "response"}`` JSON
object a line (a ``/v1/completions`` body as sent and the server's answer with its top-k
log-probabilities), against the law each request asked for, computed from the response's own
reported top-k log-probabilities.

``parse`` (a line → its samples and their sampling law, or a counted skip with its reason),
``certify/topk_laws.py`` (the request's law from a reported top-k list, exact or with stated
bounds, and every token's record fields as arrays: the fast form of
``oracle.sequence_records.records_from_top``),
``tally`` (the family's sufficient statistics, streamed in bounded memory and mergeable across
shards, and the certificate from them), ``run`` (a file streamed, chunk by chunk, on worker
processes, with progress and a partial-result file), ``allocator`` (glibc told to keep freed
memory: a chunk's numpy temporaries reuse it), ``report`` (text and JSON, in the shape of
``certify endpoint``'s).  The statistics are oracle's (``sequence_family``, ``sequence_scores``,
``sequence_reports``).

Imports no torch (tests/certify/endpoint/test_light.py)."""
