"""Workbench toolkit: the customer relationship manager (search, add, update, delete customers)."""

from __future__ import annotations

from services.env.environments.base import ToolError
from services.env.environments.workbench.registry import find, need, next_id, paginate, tool
from services.env.environments.workbench.tables import PRODUCTS, STATUSES, Tables

CUSTOMER_FIELDS = ("customer_name", "assigned_to_email", "customer_email", "customer_phone", "last_contact_date",
                   "product_interest", "status", "notes", "follow_up_by")
ID = ("string", "Id of the customer")
_TEXT = ("customer_name", "customer_email", "product_interest", "status", "assigned_to_email")
_RANGES = (("last_contact_date_min", "last_contact_date", 1), ("last_contact_date_max", "last_contact_date", -1),
           ("follow_up_by_min", "follow_up_by", 1), ("follow_up_by_max", "follow_up_by", -1))


@tool("customer_relationship_manager_search_customers", "Searches customers (text fields by case-insensitive "
      "containment, dates by range); at least one criterion.",
      {"customer_name": ("string", "Name of the customer"), "customer_email": ("string", "Email of the customer"),
       "product_interest": ("string", "Product the customer is interested in"),
       "status": ("string", "Status of the customer"), "assigned_to_email": ("string", "Email of the account owner"),
       "last_contact_date_min": ("string", "Earliest last contact, YYYY-MM-DD"),
       "last_contact_date_max": ("string", "Latest last contact, YYYY-MM-DD"),
       "follow_up_by_min": ("string", "Earliest follow-up date, YYYY-MM-DD"),
       "follow_up_by_max": ("string", "Latest follow-up date, YYYY-MM-DD"),
       "page": ("integer", "Page of results (from 1)"), "page_size": ("integer", "Customers per page (default 5)")})
def search_customers(t: Tables, page: int = 1, page_size: int = 5, **criteria) -> dict | str:
    if not any(criteria.values()):
        raise ToolError("give at least one search criterion")
    rows = t.customers
    for column in _TEXT:
        if criteria.get(column):
            rows = [r for r in rows if criteria[column].lower() in (r[column] or "").lower()]
    for arg, column, sign in _RANGES:
        bound = criteria.get(arg)
        if bound:  # compared as text, as WorkBench does (its dates are ISO, so text order is time order)
            rows = [r for r in rows if r[column] is not None and (r[column] >= bound if sign > 0 else r[column] <= bound)]
    if not rows:
        return "No customers found."
    return paginate(rows, page, page_size, "customers")


def _check(field: str, value: str) -> None:
    if field == "status" and value not in STATUSES:
        raise ToolError(f"status must be one of {', '.join(STATUSES)}, got {value!r}")
    if field == "product_interest" and value not in PRODUCTS:
        raise ToolError(f"product_interest must be one of {', '.join(PRODUCTS)}, got {value!r}")


@tool("customer_relationship_manager_update_customer", "Changes one field of a customer.",
      {"customer_id": ID, "field": ("string", f"The field to change, one of: {', '.join(CUSTOMER_FIELDS)}"),
       "new_value": ("string", "The new value")}, ("customer_id", "field", "new_value"), writes=True)
def update_customer(t: Tables, customer_id=None, field=None, new_value=None) -> str:
    need(customer_id=customer_id, field=field, new_value=new_value)
    _check(field, new_value)
    if field in ("customer_email", "assigned_to_email"):
        new_value = new_value.lower()
    row = find(t.customers, "customer_id", customer_id, "customer")
    if field not in CUSTOMER_FIELDS:
        raise ToolError(f"field {field!r} cannot be changed; fields: {', '.join(CUSTOMER_FIELDS)}")
    row[field] = new_value
    return "Customer updated successfully."


@tool("customer_relationship_manager_add_customer", "Adds a customer and returns the new id.",
      {"customer_name": ("string", "Name of the customer"), "assigned_to_email": ("string", "Email of the account owner"),
       "status": ("string", f"One of: {', '.join(STATUSES)}"), "customer_email": ("string", "Email of the customer"),
       "customer_phone": ("string", "Phone number"), "last_contact_date": ("string", "Last contact, YYYY-MM-DD"),
       "product_interest": ("string", f"One of: {', '.join(PRODUCTS)}"), "notes": ("string", "Notes"),
       "follow_up_by": ("string", "Next follow-up date, YYYY-MM-DD")},
      ("customer_name", "assigned_to_email", "status"), writes=True)
def add_customer(t: Tables, customer_name=None, assigned_to_email=None, status=None, customer_email=None,
                 customer_phone=None, last_contact_date=None, product_interest=None, notes="", follow_up_by=None) -> str:
    need(customer_name=customer_name, assigned_to_email=assigned_to_email, status=status)
    new_id = next_id(t.customers, "customer_id")
    t.customers.append({"customer_id": new_id, "assigned_to_email": assigned_to_email.lower(),
                        "customer_name": customer_name, "customer_email": customer_email.lower() if customer_email else None,
                        "customer_phone": customer_phone, "last_contact_date": last_contact_date,
                        "product_interest": product_interest, "status": status, "follow_up_by": follow_up_by,
                        "notes": notes})
    return new_id


@tool("customer_relationship_manager_delete_customer", "Deletes a customer, by id.", {"customer_id": ID},
      ("customer_id",), writes=True)
def delete_customer(t: Tables, customer_id=None) -> str:
    need(customer_id=customer_id)
    t.customers.remove(find(t.customers, "customer_id", customer_id, "customer"))
    return "Customer deleted successfully."
