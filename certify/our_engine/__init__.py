"""``spectr-gbv certify our-engine``: our speculative-decoding engine end to end, white box
(``certificate.certify_engine``): N seeded generations per rule, the first token against the
target's exact law and every iteration's τ against the reference rule's exact law given the rows
the verifier got (``runs``) and the stated power (``power``; the planted rules' laws:
``certify.planted_laws``)."""
