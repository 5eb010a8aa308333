"""Drop the auctions index on (advertiser_id, ts): no query uses it, and it halved ingest.

Every read of auctions selects a time window (``ts``, served by ``ix_auctions_ts``) and groups
the rows by advertiser in memory; nothing filters auctions by advertiser, and advertisers are
never deleted (the foreign key's cascade is the one statement it could serve). Maintaining it
cost half of an ingest's write time: 300,000 auction rows into SQLite at 55,600 rows/s with it
(benchmarks/results/ingest_throughput.md).

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index('ix_auctions_advertiser_ts', table_name='auctions')


def downgrade() -> None:
    op.create_index('ix_auctions_advertiser_ts', 'auctions', ['advertiser_id', 'ts'])
