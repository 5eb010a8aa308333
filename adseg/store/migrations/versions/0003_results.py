"""Run results: segments, segment c.d.f.s, forecasts, metrics; run locks.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'run_locks',
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=True),
        sa.Column('holder', sa.String(length=256), nullable=False),
        sa.Column('acquired_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_run_locks')),
    )
    op.create_table(
        'segments',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('advertiser_id', sa.String(length=64), nullable=False),
        sa.Column('segment', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], name=op.f('fk_segments_run_id_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id', 'source', 'advertiser_id', name=op.f('pk_segments')),
    )
    op.create_table(
        'segment_cdfs',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('segment', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('bid_ecpm', sa.Float(), nullable=False),
        sa.Column('cdf', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], name=op.f('fk_segment_cdfs_run_id_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id', 'source', 'segment', 'kind', 'bid_ecpm', name=op.f('pk_segment_cdfs')),
    )
    op.create_table(
        'forecasts',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('method', sa.String(length=16), nullable=False),
        sa.Column('supply_mode', sa.String(length=16), nullable=False),
        sa.Column('advertiser_id', sa.String(length=64), nullable=False),
        sa.Column('impressions_forecast', sa.Float(), nullable=False),
        sa.Column('impressions_actual', sa.Float(), nullable=False),
        sa.Column('spend_forecast', sa.Float(), nullable=False),
        sa.Column('spend_actual', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], name=op.f('fk_forecasts_run_id_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id', 'source', 'method', 'supply_mode', 'advertiser_id', name=op.f('pk_forecasts')),
    )
    op.create_table(
        'metrics',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('method', sa.String(length=16), nullable=False),
        sa.Column('supply_mode', sa.String(length=16), nullable=False),
        sa.Column('impressions_mape', sa.Float(), nullable=True),
        sa.Column('spend_mape', sa.Float(), nullable=True),
        sa.Column('n_advertisers', sa.Integer(), nullable=False),
        sa.Column('n_segments', sa.Integer(), nullable=False),
        sa.Column('n_zero_impressions', sa.Integer(), nullable=False),
        sa.Column('n_zero_spend', sa.Integer(), nullable=False),
        sa.Column('n_missing_forecast', sa.Integer(), nullable=False),
        sa.Column('kappa_win', sa.Float(), nullable=True),
        sa.Column('kappa_cost', sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], name=op.f('fk_metrics_run_id_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id', 'source', 'method', 'supply_mode', name=op.f('pk_metrics')),
    )


def downgrade() -> None:
    op.drop_table('metrics')
    op.drop_table('forecasts')
    op.drop_table('segment_cdfs')
    op.drop_table('segments')
    op.drop_table('run_locks')

