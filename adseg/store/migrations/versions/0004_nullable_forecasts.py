"""Forecasts may be missing: an advertiser with no training delivery has no supply forecast.

With ``--supply forecast`` (or ``both``) an advertiser that delivered in the evaluation window but
not in the training window (a new advertiser) has no supply history, so its forecast is unknown:
NULL, left out of the MAPE and counted in ``metrics.n_missing_forecast``. Revision 0003 declared
the forecast columns NOT NULL, and such a run failed on insert.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot ALTER a column's nullability in place (the table is copied)
    with op.batch_alter_table('forecasts') as batch:
        batch.alter_column('impressions_forecast', existing_type=sa.Float(), nullable=True)
        batch.alter_column('spend_forecast', existing_type=sa.Float(), nullable=True)


def downgrade() -> None:
    op.execute('DELETE FROM forecasts WHERE impressions_forecast IS NULL OR spend_forecast IS NULL')
    with op.batch_alter_table('forecasts') as batch:
        batch.alter_column('impressions_forecast', existing_type=sa.Float(), nullable=False)
        batch.alter_column('spend_forecast', existing_type=sa.Float(), nullable=False)
