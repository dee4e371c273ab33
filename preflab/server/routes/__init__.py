"""The endpoints of `preflab serve`, one `APIRouter` per concern: Label Studio's ML backend (`backend`),
the webhook receiver (`webhooks`) and `/health` (`health`); what they depend on comes from `deps`."""
