"""Base clusterings of each run (views).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'base_clustering_columns',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('column_index', sa.Integer(), nullable=False),
        sa.Column('view', sa.String(length=32), nullable=False),
        sa.Column('parameter', sa.String(length=64), nullable=False),
        sa.Column('n_clusters', sa.Integer(), nullable=False),
        sa.Column('n_excluded', sa.Integer(), nullable=False),
        sa.Column('seconds', sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], name=op.f('fk_base_clustering_columns_run_id_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id', 'column_index', name=op.f('pk_base_clustering_columns')),
    )
    op.create_table(
        'base_clustering_labels',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('column_index', sa.Integer(), nullable=False),
        sa.Column('advertiser_id', sa.String(length=64), nullable=False),
        sa.Column('label', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.run_id'], name=op.f('fk_base_clustering_labels_run_id_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id', 'column_index', 'advertiser_id', name=op.f('pk_base_clustering_labels')),
    )


def downgrade() -> None:
    op.drop_table('base_clustering_labels')
    op.drop_table('base_clustering_columns')

