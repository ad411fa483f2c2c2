"""A profile keeps the highest fact id it gave out (`profiles.last_fact_id`).

A fact's id was one more than the highest kept, so a fact learnt after the newest was dropped (its message edited
or deleted in Slack, or its channel narrowed) took the dropped one's id, and `myao2 profile promote USER FACT_ID`
after a listing could promote another fact than the one listed. Filled here from the facts kept now.

Revision ID: 0026
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("last_fact_id", sa.Integer(), nullable=False, server_default="0"))
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT user_id, facts FROM profiles")).all()
    last = [{"user_id": user_id, "last": max((f["id"] for f in json.loads(facts)), default=0)} for user_id, facts in rows]
    if last:
        bind.execute(sa.text("UPDATE profiles SET last_fact_id = :last WHERE user_id = :user_id"), last)


def downgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("last_fact_id")
