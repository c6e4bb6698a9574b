"""What only object stores need of a writable root (operations/files.py `Root`): the lock's
conditional creates (S3 `If-None-Match: *`, GCS `ifGenerationMatch=0`, Azure Blob
`If-None-Match: *`), batched deletes (S3 DeleteObjects, Azure Blob batches, GCS one request per
file on a few threads), S3 reads and server-side copies through boto3, and the clients and
credentials these take."""
from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import TYPE_CHECKING, Any, Optional

from streamctl.formats.errors import StorageError
from streamctl.inspectors.storage import AZURE_KEY_ENV, AZURE_SCHEMES, azure_location, parallel_map
from streamctl.operations.paths import check_rel

if TYPE_CHECKING:
    from streamctl.operations.files import Root

S3_DELETE_BATCH = 1000  # keys per DeleteObjects request (the API's limit)
AZURE_DELETE_BATCH = 256  # sub-requests per Blob batch request (the API's limit)
DELETE_THREADS = 8
S3_COPY_LIMIT = 5 << 30  # CopyObject copies objects up to 5 GiB in one request
CHUNK = 1 << 20  # bytes per read when hashing
_S3_LOCK = threading.Lock()


def hash_stream(fh: Any) -> tuple[int, str]:
    """(size, sha256 hex) of what a binary stream reads to its end."""
    h = hashlib.sha256()
    size = 0
    while True:
        block = fh.read(CHUNK)
        if not block:
            return size, h.hexdigest()
        size += len(block)
        h.update(block)


def scheme_of(location: str) -> str:
    return location.split("://", 1)[0].lower()


class ObjectStore:
    """The object-store side of one root."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create an object only if it does not exist (the lock). False when it exists."""
        scheme = scheme_of(self.root.location)
        if scheme in ("s3", "s3a", "s3n"):
            return self.s3_create_exclusive(rel, data)
        if scheme in ("gs", "gcs"):
            return self.gcs_create_exclusive(rel, data)
        if scheme in AZURE_SCHEMES:
            return self.azure_create_exclusive(rel, data)
        raise StorageError(self.root.uri(rel), "exclusive create (the lock) is supported on local file systems, S3, "
                                               "GCS and Azure Blob only")

    def delete_many(self, rels: list[str]) -> None:
        """Delete objects, absent ones included, in as few requests as the store allows."""
        scheme = scheme_of(self.root.location)
        if scheme in ("s3", "s3a", "s3n"):
            self.s3_delete_many(rels)
        elif scheme in AZURE_SCHEMES:
            self.azure_delete_many(rels)
        else:
            parallel_map(self.delete_file, rels, DELETE_THREADS)

    def s3_copy(self, rel: str, dest: ObjectStore, dest_rel: str) -> None:
        """S3 CopyObject within one store: no bytes through this process."""
        from botocore.exceptions import ClientError

        src_bucket, src_key = self.key(rel)
        bucket, key = dest.key(dest_rel)
        try:
            self.s3().copy_object(Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key})
        except ClientError as exc:
            raise StorageError(self.root.uri(rel), f"copy to {dest.root.uri(dest_rel)} failed: "
                                                   f"{exc.response.get('Error', {}).get('Code')}") from None

    @property
    def is_s3(self) -> bool:
        return self.root.location.split("://", 1)[0].lower() in ("s3", "s3a", "s3n")

    def s3(self) -> Any:
        """This root's boto3 client, made once (clients are thread-safe; making them is not)."""
        with _S3_LOCK:
            if self.root._s3_cached is None:
                self.root._s3_cached = self.s3_client("")
        return self.root._s3_cached

    def file_digest(self, rel: str) -> Optional[tuple[int, str]]:
        """One GetObject (pyarrow's stream asks HeadObject first): None when no such key."""
        from botocore.exceptions import ClientError

        bucket, key = self.key(rel)
        try:
            body = self.s3().get_object(Bucket=bucket, Key=key)["Body"]
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise StorageError(self.root.uri(rel), f"cannot read: {exc.response.get('Error', {}).get('Code')}") from None
        try:
            return hash_stream(body)
        finally:
            body.close()

    def key(self, rel: str) -> tuple[str, str]:
        """(bucket or container, object key) of `rel` on an object store."""
        head, _, prefix = self.root._fs_root.partition("/")
        rel = check_rel(rel, self.root.location)
        return head, f"{prefix}/{rel}" if prefix else rel

    def gcs_create_exclusive(self, rel: str, data: bytes) -> bool:
        """GCS conditional create: a multipart upload with ifGenerationMatch=0 (412 when the object
        exists), over plain HTTP. The endpoint comes from the URI's `endpoint_override`/`scheme`
        options; `gs://anonymous@bucket/...` sends no credentials (an emulator), else the token
        of Google's default credentials (needs google-auth: `pip install 'streamctl[gcs]'`)."""
        import urllib.error
        import urllib.request
        from urllib.parse import parse_qsl, quote, urlparse

        parsed = urlparse(self.root.location)
        opts = dict(parse_qsl(parsed.query))
        base = (f"{opts.get('scheme', 'https')}://{opts['endpoint_override']}" if "endpoint_override" in opts
                else "https://storage.googleapis.com")
        bucket, key = self.key(rel)
        url = f"{base}/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=multipart&ifGenerationMatch=0"
        boundary = f"streamctl-{os.urandom(8).hex()}"
        body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{json.dumps({'name': key})}\r\n"
                f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        headers = {"Content-Type": f"multipart/related; boundary={boundary}"}
        if parsed.username != "anonymous":
            headers["Authorization"] = f"Bearer {gcs_token(self.root.uri(rel))}"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 412:
                return False
            raise StorageError(self.root.uri(rel), f"conditional create failed: HTTP {exc.code}") from None
        except OSError as exc:
            raise StorageError(self.root.uri(rel), f"conditional create failed: {exc}") from None
        return True

    def azure_create_exclusive(self, rel: str, data: bytes) -> bool:
        """Azure Blob conditional create: Put Blob with If-None-Match: * (409/412 when the blob
        exists). Needs azure-storage-blob (`pip install 'streamctl[azure]'`); the account key comes
        from AZURE_STORAGE_ACCOUNT_KEY, else azure-identity's default credential."""
        try:
            from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceModifiedError
            from azure.storage.blob import BlobClient
        except ImportError:
            raise StorageError(self.root.uri(rel), "changing files on Azure needs azure-storage-blob for the lock's "
                                              "conditional create (pip install 'streamctl[azure]')") from None
        account_url, credential = self.azure_service(rel)
        container, blob = self.key(rel)
        client = BlobClient(account_url, container, blob, credential=credential)
        try:
            client.upload_blob(data, overwrite=False)  # Put Blob with If-None-Match: *
        except (ResourceExistsError, ResourceModifiedError):
            return False
        except HttpResponseError as exc:
            if exc.status_code in (409, 412):
                return False
            raise StorageError(self.root.uri(rel), f"conditional create failed: HTTP {exc.status_code}") from None
        return True

    def azure_service(self, rel: str) -> tuple[str, Any]:
        """The blob service URL and credential of this Azure root (key from AZURE_STORAGE_ACCOUNT_KEY,
        else azure-identity's default credential)."""
        loc = azure_location(self.root.location)
        account_url = (f"{loc['scheme']}://{loc['blob_authority']}/{loc['account']}" if loc["blob_authority"]
                       else f"{loc['scheme']}://{loc['account']}.blob.core.windows.net")
        key = os.environ.get(AZURE_KEY_ENV)
        if key:
            return account_url, {"account_name": loc["account"], "account_key": key}
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            raise StorageError(self.root.uri(rel), f"no Azure credential: set {AZURE_KEY_ENV} or install "
                                              "azure-identity") from None
        return account_url, DefaultAzureCredential()

    def s3_client(self, rel: str) -> Any:
        """A boto3 S3 client for this root; endpoint and region come from the URI's
        `endpoint_override`/`scheme`/`region` options or the usual AWS environment."""
        from urllib.parse import parse_qsl, urlparse

        try:
            import boto3
        except ImportError:
            raise StorageError(self.root.uri(rel), "changing files on S3 needs boto3 for the lock's conditional write "
                                              "(pip install 'streamctl[s3]')") from None
        opts = dict(parse_qsl(urlparse(self.root.location).query))
        endpoint = None
        if "endpoint_override" in opts:
            endpoint = f"{opts.get('scheme', 'https')}://{opts['endpoint_override']}"
        return boto3.client("s3", endpoint_url=endpoint, region_name=opts.get("region") or None)

    def s3_create_exclusive(self, rel: str, data: bytes) -> bool:
        """S3 conditional write: PutObject with If-None-Match: * (412 when the key exists).
        Needs boto3 (`pip install 'streamctl[s3]'`)."""
        from botocore.exceptions import ClientError

        client = self.s3_client(rel)
        bucket, key = self.key(rel)
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return False
            raise StorageError(self.root.uri(rel), f"conditional write failed: {code or status}") from None
        return True

    def delete_file(self, rel: str) -> None:
        try:
            self.root._fs.delete_file(self.root._remote(rel))  # type: ignore[union-attr]
        except FileNotFoundError:
            pass

    def s3_delete_many(self, rels: list[str]) -> None:
        client = self.s3()
        keys = [self.key(rel) for rel in rels]
        for i in range(0, len(keys), S3_DELETE_BATCH):
            chunk = keys[i:i + S3_DELETE_BATCH]
            resp = client.delete_objects(Bucket=chunk[0][0], Delete={"Objects": [{"Key": k} for _b, k in chunk],
                                                                    "Quiet": True})
            errors = [e for e in resp.get("Errors") or [] if e.get("Code") != "NoSuchKey"]
            if errors:
                raise StorageError(self.root.uri(rels[0]), f"DeleteObjects failed for {len(errors)} key(s): "
                                                      f"{errors[0].get('Key')}: {errors[0].get('Code')}")

    def azure_delete_many(self, rels: list[str]) -> None:
        from azure.storage.blob import ContainerClient

        account_url, credential = self.azure_service(rels[0])
        keys = [self.key(rel) for rel in rels]
        client = ContainerClient(account_url, keys[0][0], credential=credential)
        for i in range(0, len(keys), AZURE_DELETE_BATCH):
            chunk = [k for _c, k in keys[i:i + AZURE_DELETE_BATCH]]
            for resp in client.delete_blobs(*chunk, raise_on_any_failure=False):
                if resp.status_code not in (200, 202, 404):
                    raise StorageError(self.root.uri(rels[0]), f"batch delete failed: HTTP {resp.status_code}")


def gcs_token(where: str) -> str:
    try:
        import google.auth
        import google.auth.transport.requests
    except ImportError:
        raise StorageError(where, "changing files on GCS needs google-auth for the lock's conditional create "
                                  "(pip install 'streamctl[gcs]'), or gs://anonymous@... for an emulator") from None
    try:
        creds, _project = google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
        creds.refresh(google.auth.transport.requests.Request())
    except Exception as exc:  # noqa: BLE001 - google-auth raises several kinds
        raise StorageError(where, f"no Google credentials for the lock's conditional create ({type(exc).__name__})") from None
    return str(creds.token)
