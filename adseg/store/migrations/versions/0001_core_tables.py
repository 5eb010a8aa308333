"""Core tables: advertisers, auctions, daily delivery, runs.

Revision ID: 0001
Revises: None
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'advertisers',
        sa.Column('advertiser_id', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=512), nullable=False),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('advertiser_id', name=op.f('pk_advertisers')),
    )
    op.create_table(
        'auctions',
        sa.Column('auction_id', sa.String(length=64), nullable=False),
        sa.Column('advertiser_id', sa.String(length=64), nullable=False),
        sa.Column('ts', sa.DateTime(timezone=True), nullable=False),
        sa.Column('bid_micros', sa.BigInteger(), nullable=False),
        sa.Column('market_price_micros', sa.BigInteger(), nullable=False),
        sa.Column('won', sa.Boolean(), nullable=False),
        sa.Column('paid_micros', sa.BigInteger(), nullable=True),
        sa.CheckConstraint('(won AND paid_micros IS NOT NULL AND paid_micros >= 0) OR (NOT won AND paid_micros IS NULL)', name=op.f('ck_auctions_paid_iff_won')),
        sa.CheckConstraint('bid_micros >= 0 AND market_price_micros >= 0', name=op.f('ck_auctions_prices_nonnegative')),
        sa.ForeignKeyConstraint(['advertiser_id'], ['advertisers.advertiser_id'], name=op.f('fk_auctions_advertiser_id_advertisers'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('auction_id', name=op.f('pk_auctions')),
    )
    op.create_index('ix_auctions_advertiser_ts', 'auctions', ['advertiser_id', 'ts'])
    op.create_index('ix_auctions_ts', 'auctions', ['ts'])
    op.create_table(
        'delivery',
        sa.Column('advertiser_id', sa.String(length=64), nullable=False),
        sa.Column('date', sa.Date(), nullable=False),
        sa.Column('bid_requests', sa.BigInteger(), nullable=False),
        sa.Column('bid_micros', sa.BigInteger(), nullable=False),
        sa.Column('impressions', sa.BigInteger(), nullable=False),
        sa.Column('spend_micros', sa.BigInteger(), nullable=False),
        sa.CheckConstraint('bid_micros >= 0 AND spend_micros >= 0', name=op.f('ck_delivery_money_nonnegative')),
        sa.CheckConstraint('bid_requests >= impressions AND impressions >= 0', name=op.f('ck_delivery_impressions_within_supply')),
        sa.ForeignKeyConstraint(['advertiser_id'], ['advertisers.advertiser_id'], name=op.f('fk_delivery_advertiser_id_advertisers'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('advertiser_id', 'date', name=op.f('pk_delivery')),
    )
    op.create_index('ix_delivery_date', 'delivery', ['date'])
    op.create_table(
        'runs',
        sa.Column('run_id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('kind', sa.String(length=32), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('train_start', sa.Date(), nullable=True),
        sa.Column('train_end', sa.Date(), nullable=True),
        sa.Column('eval_start', sa.Date(), nullable=True),
        sa.Column('eval_end', sa.Date(), nullable=True),
        sa.Column('seed', sa.BigInteger(), nullable=True),
        sa.Column('parameters', sa.JSON(), nullable=False),
        sa.Column('code_version', sa.String(length=64), nullable=False),
        sa.Column('timings', sa.JSON(), nullable=False),
        sa.Column('error', sa.Text(), nullable=True),
        sa.CheckConstraint("status IN ('running', 'completed', 'failed')", name=op.f('ck_runs_status_known')),
        sa.PrimaryKeyConstraint('run_id', name=op.f('pk_runs')),
    )
    op.create_index('ix_runs_status_started', 'runs', ['status', 'started_at'])


def downgrade() -> None:
    op.drop_table('runs')
    op.drop_table('delivery')
    op.drop_table('auctions')
    op.drop_table('advertisers')

