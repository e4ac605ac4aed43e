//! The verbs of an operation, each batch awaited as the operation waits ([`Client::waiting`]):
//! in blocking mode exactly the [`Endpoint`] call it stands for, in posting mode posted and
//! awaited (see [`crate::wait`]).

use rdma_transport::{Endpoint, RemoteAddr, TransportError, Verb};

use super::Client;
use crate::wait;

impl<E: Endpoint> Client<E> {
    /// `verbs` as one batch, as [`Endpoint::batch`] runs them: refused whole, nothing executed,
    /// if they exceed one batch's limits.
    pub(super) async fn one_batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        rdma_transport::validate_batch(verbs)?;
        wait::batches(&mut self.ep, self.waiting, verbs).await
    }

    /// `verbs` as [`Endpoint::batches`] runs them (split into several batches if they exceed
    /// one; work split so blocks its thread even in posting mode).
    pub(super) async fn batches(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        wait::batches(&mut self.ep, self.waiting, verbs).await
    }

    /// [`Endpoint::read`].
    pub(super) async fn remote_read(
        &mut self,
        addr: RemoteAddr,
        buf: &mut [u8],
    ) -> Result<(), TransportError> {
        self.batches(&mut [Verb::read(addr, buf)]).await
    }

    /// [`Endpoint::write`].
    pub(super) async fn remote_write(
        &mut self,
        addr: RemoteAddr,
        data: &[u8],
    ) -> Result<(), TransportError> {
        self.batches(&mut [Verb::write(addr, data)]).await
    }

    /// [`Endpoint::read_word`].
    pub(super) async fn remote_read_word(
        &mut self,
        addr: RemoteAddr,
    ) -> Result<u64, TransportError> {
        let mut buf = [0u8; 8];
        self.remote_read(addr, &mut buf).await?;
        Ok(u64::from_le_bytes(buf))
    }

    /// [`Endpoint::write_word`].
    pub(super) async fn remote_write_word(
        &mut self,
        addr: RemoteAddr,
        value: u64,
    ) -> Result<(), TransportError> {
        self.remote_write(addr, &value.to_le_bytes()).await
    }

    /// [`Endpoint::cas`]: the word's previous value.
    pub(super) async fn remote_cas(
        &mut self,
        addr: RemoteAddr,
        expected: u64,
        desired: u64,
    ) -> Result<u64, TransportError> {
        let mut verbs = [Verb::cas(addr, expected, desired)];
        self.one_batch(&mut verbs).await?;
        Ok(verbs[0].old_value().unwrap_or_default())
    }

    /// [`Endpoint::faa`]: the word's previous value.
    pub(super) async fn remote_faa(
        &mut self,
        addr: RemoteAddr,
        add: u64,
    ) -> Result<u64, TransportError> {
        let mut verbs = [Verb::faa(addr, add)];
        self.one_batch(&mut verbs).await?;
        Ok(verbs[0].old_value().unwrap_or_default())
    }
}
